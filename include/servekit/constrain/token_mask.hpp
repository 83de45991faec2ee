// SPDX-License-Identifier: Apache-2.0
#pragma once
// Token masks: which of the vocabulary's tokens keep a constrained text valid.
//
// The vocabulary's tokens are sorted by their bytes, so that consecutive tokens share a prefix
// (a trie walked in order): the matcher states along the previous token's bytes are reused up
// to the common prefix, and when a prefix kills the state every token that starts with it is
// skipped without feeding a byte. A mask is computed once per matcher state and kept in the
// grammar's cache, shared by every request with that grammar; a request that has seen the
// state before (the same key of the same object, the same count of characters in a bounded
// string, ...) pays a lookup.
//
// Budget: with B tokens left, a token is allowed only if the text can still be completed in
// B - 1 more (Matcher::min_finish), so a request that runs out of tokens closes its open
// strings, arrays and objects in time. Such masks are computed for the (state, B) pair and
// cached the same way; they only arise in a request's last few steps.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "servekit/constrain/grammar.hpp"
#include "servekit/constrain/matcher.hpp"
#include "servekit/core/error.hpp"
#include "servekit/text/gpt2_tokenizer.hpp"

namespace servekit::constrain {

// The tokens a mask ranges over, sorted by bytes. The end-of-text token is not among them: it
// is allowed where the text may end, and only then.
struct Vocab {
  int V = 0;                  // mask bits: tokens 0..V-1
  int32_t eos = -1;           // the end-of-text token
  std::vector<int32_t> ids;   // (n) in byte order
  std::vector<uint32_t> off;  // (n + 1) into bytes
  std::vector<uint16_t> lcp;  // (n) bytes shared with the previous token in order
  std::string bytes;
  int max_len = 0;

  int words() const { return (V + 31) / 32; }

  // One per tokenizer file and vocabulary size, built on first use (~50 ms for GPT-2's).
  static std::shared_ptr<const Vocab> of(const text::Gpt2Tokenizer& tok, int V, int32_t eos) {
    static std::mutex mu;
    static std::map<std::tuple<std::string, int, int, int32_t>, std::shared_ptr<const Vocab>> made;
    if (V <= 0 || V > tok.vocab_size())
      fail("constrain: a vocabulary of ", V, " tokens, but the tokenizer has ", tok.vocab_size());
    const auto key = std::make_tuple(tok.vocab_file().string(), tok.vocab_size(), V, eos);
    std::lock_guard lock(mu);
    auto& slot = made[key];
    if (!slot) slot = build(tok, V, eos);
    return slot;
  }

  static std::shared_ptr<const Vocab> build(const text::Gpt2Tokenizer& tok, int V, int32_t eos) {
    auto v = std::make_shared<Vocab>();
    v->V = V, v->eos = eos;
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < V; i++)
      if (i != eos && !tok.token_view(i).empty()) ids.push_back(i);
    std::sort(ids.begin(), ids.end(),
              [&](int32_t a, int32_t b) { return tok.token_view(a) < tok.token_view(b); });
    v->off.push_back(0);
    std::string_view prev;
    for (int32_t id : ids) {
      const std::string_view s = tok.token_view(id);
      std::size_t l = 0;
      while (l < s.size() && l < prev.size() && s[l] == prev[l]) l++;
      v->ids.push_back(id);
      v->lcp.push_back(static_cast<uint16_t>(std::min<std::size_t>(l, 65535)));
      v->bytes += s;
      v->off.push_back(static_cast<uint32_t>(v->bytes.size()));
      v->max_len = std::max(v->max_len, static_cast<int>(s.size()));
      prev = s;
    }
    if (v->max_len > 65535) fail("constrain: a token of ", v->max_len, " bytes");
    return v;
  }
};

struct MaskEntry {
  std::vector<uint32_t> words;  // (Vocab::words) bit v: token v allowed
  int max_fin = 0;              // the most bytes any allowed token leaves to finish
  int allowed = 0;              // allowed tokens, end-of-text included
};

// A grammar's masks for one vocabulary, by state key (and budget, where one binds).
struct MaskCacheSlot {
  std::unordered_map<std::string, std::shared_ptr<const MaskEntry>> map;
  long hits = 0, misses = 0;
  static constexpr std::size_t kMaxEntries = 2048;  // ~13 MB of GPT-2 masks, then start over
};

// Computes masks; one per thread of work (its matcher and per-depth states are scratch).
class MaskMaker {
 public:
  MaskMaker(const Grammar& g, const Vocab& v) : m_(g), v_(v) {}

  // The tokens allowed after state s; budget: only those that leave a text completable within
  // budget - 1 more tokens (kInf: no limit). Empty if none.
  MaskEntry make(const State& s, int budget) {
    MaskEntry e;
    e.words.assign(v_.words(), 0);
    auto allow = [&](int32_t id) { e.words[id >> 5] |= 1u << (id & 31), e.allowed++; };
    if (m_.complete(s)) {
      if (v_.eos >= 0 && v_.eos < v_.V) allow(v_.eos);
      return e;
    }
    if (v_.eos >= 0 && v_.eos < v_.V && m_.accepts(s)) allow(v_.eos);
    if (static_cast<int>(depth_.size()) < v_.max_len + 1) depth_.resize(v_.max_len + 1);
    depth_[0].copy_from(s);
    const int n = static_cast<int>(v_.ids.size());
    int valid = 0;     // depth_[0..valid] hold the previous token's prefixes' states
    int dead_at = -1;  // the previous token's prefix of this length killed the state
    const auto* bytes = reinterpret_cast<const uint8_t*>(v_.bytes.data());
    for (int i = 0; i < n; i++) {
      const int l = v_.lcp[i];
      if (dead_at >= 0 && l >= dead_at) continue;  // starts with the same dead prefix
      dead_at = -1;
      valid = std::min(valid, l);
      const int len = static_cast<int>(v_.off[i + 1] - v_.off[i]);
      const uint8_t* tb = bytes + v_.off[i];
      for (int d = valid + 1; d <= len; d++) {
        m_.feed(depth_[d - 1], tb[d - 1], depth_[d]);
        valid = d;
        if (depth_[d].dead()) {
          dead_at = d;
          break;
        }
      }
      if (dead_at >= 0) continue;
      const int fin = m_.min_finish(depth_[len]);
      if (fin > budget - 1) continue;
      allow(v_.ids[i]);
      e.max_fin = std::max(e.max_fin, fin);
    }
    return e;
  }

  const Matcher& matcher() const { return m_; }

 private:
  Matcher m_;
  const Vocab& v_;
  std::vector<State> depth_;  // (max_len + 1) states after each prefix length
};

// One request's constraint: its state, and the mask of its next token.
class Constraint {
 public:
  Constraint(std::shared_ptr<const Grammar> g, std::shared_ptr<const Vocab> v)
      : g_(std::move(g)), v_(std::move(v)), maker_(*g_, *v_) {
    maker_.matcher().start(state_);
    {
      std::lock_guard lock(g_->cache_mu);
      auto& slot = g_->caches[v_.get()];
      if (!slot) slot = std::make_shared<MaskCacheSlot>();
      cache_ = slot;
    }
  }

  const Grammar& grammar() const { return *g_; }
  const Vocab& vocab() const { return *v_; }

  // The next token's mask (Vocab::words words) with `budget` >= 1 tokens left. If no token
  // can finish the text within the budget, the ones that come closest are allowed: the text
  // may then end unfinished, but never with a token the grammar refuses.
  const std::vector<uint32_t>& mask(int budget) {
    budget = std::max(budget, 1);
    auto e = lookup(budget >= kInf ? kInf : budget);
    if (e->allowed == 0) {
      // Over budget: the fewest bytes any allowed token leaves.
      const int need = maker_.matcher().min_finish(state_);
      e = lookup(std::max(budget, need));
      if (e->allowed == 0) e = lookup(kInf);
    }
    if (e->allowed == 0)
      fail("constrain: no token continues the text here (grammar ", g_->source, ")");
    last_ = e;
    return e->words;
  }

  bool allowed(int32_t id) const {
    return last_ && id >= 0 && id < v_->V && (last_->words[id >> 5] >> (id & 31) & 1);
  }

  // The token was generated: feeds its bytes. An id the grammar refuses is an error.
  void advance(int32_t id, std::string_view bytes) {
    if (id == v_->eos) {
      if (!maker_.matcher().accepts(state_))
        fail("constrain: end of text where the JSON is not complete");
      ended_ = true;
      return;
    }
    for (std::size_t i = 0; i < bytes.size(); i++) {
      maker_.matcher().feed(state_, static_cast<uint8_t>(bytes[i]), next_);
      std::swap(state_, next_);
      if (state_.dead())
        fail("constrain: token ", id, " (", string_brief(bytes), ") breaks the JSON at its byte ",
             i);
    }
  }

  bool complete() const { return ended_ || maker_.matcher().complete(state_); }
  bool accepts() const { return maker_.matcher().accepts(state_); }
  int min_finish() const { return maker_.matcher().min_finish(state_); }
  long cache_hits() const { return cache_->hits; }
  long cache_misses() const { return cache_->misses; }

 private:
  std::shared_ptr<const MaskEntry> lookup(int budget) {
    state_.key(key_);
    std::shared_ptr<const MaskEntry> unbounded;
    {
      std::lock_guard lock(g_->cache_mu);
      if (auto it = cache_->map.find(key_); it != cache_->map.end())
        unbounded = it->second, cache_->hits++;
    }
    if (!unbounded) unbounded = compute(key_, kInf);
    if (budget >= kInf || unbounded->max_fin <= budget - 1) return unbounded;
    std::string k = key_;
    k.append(reinterpret_cast<const char*>(&budget), sizeof budget);
    {
      std::lock_guard lock(g_->cache_mu);
      if (auto it = cache_->map.find(k); it != cache_->map.end()) {
        cache_->hits++;
        return it->second;
      }
    }
    return compute(k, budget);
  }

  std::shared_ptr<const MaskEntry> compute(const std::string& key, int budget) {
    auto e = std::make_shared<const MaskEntry>(maker_.make(state_, budget));
    std::lock_guard lock(g_->cache_mu);
    cache_->misses++;
    if (cache_->map.size() >= MaskCacheSlot::kMaxEntries) cache_->map.clear();
    cache_->map.emplace(key, e);
    return e;
  }

  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const Vocab> v_;
  MaskMaker maker_;
  std::shared_ptr<MaskCacheSlot> cache_;
  State state_, next_;
  std::string key_;
  std::shared_ptr<const MaskEntry> last_;
  bool ended_ = false;
};

}  // namespace servekit::constrain
