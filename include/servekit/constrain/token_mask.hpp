// SPDX-License-Identifier: Apache-2.0
#pragma once
// Token masks: which of the vocabulary's tokens keep a constrained text valid.
//
// A mask is made by constrain/mask_maker.hpp, thread by thread of the matcher's state (a
// string's from the vocabulary's precomputed table, a pattern's on its DFA, the rest by a walk
// of the vocabulary's trie). It is computed once per matcher state and kept in the
// grammar's cache, shared by every request with that grammar; a request that has seen the
// state before (the same key of the same object, the same count of characters in a bounded
// string, ...) pays a lookup.
//
// Budget: with B tokens left, a token is allowed only if the text can still be completed in
// B - 1 more (Matcher::min_finish), so a request that runs out of tokens closes its open
// strings, arrays and objects in time. Such masks are computed for the (state, B) pair and
// cached the same way; they only arise in a request's last few steps.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "servekit/constrain/grammar.hpp"
#include "servekit/constrain/mask_maker.hpp"
#include "servekit/constrain/matcher.hpp"
#include "servekit/constrain/gbnf.hpp"
#include "servekit/constrain/text_grammar.hpp"
#include "servekit/constrain/vocab.hpp"
#include "servekit/core/error.hpp"
#include "servekit/text/gpt2_tokenizer.hpp"

namespace servekit::constrain {

// A grammar's masks for one vocabulary, by state key (and budget, where one binds).
struct MaskCacheSlot {
  std::unordered_map<std::string, std::shared_ptr<const MaskEntry>> map;
  long hits = 0, misses = 0;
  static constexpr std::size_t kMaxEntries = 2048;  // ~13 MB of GPT-2 masks, then start over
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
        fail("constrain: end of text where the text is not complete (", g_->source, ")");
      ended_ = true;
      return;
    }
    for (std::size_t i = 0; i < bytes.size(); i++) {
      maker_.matcher().feed(state_, static_cast<uint8_t>(bytes[i]), next_);
      std::swap(state_, next_);
      if (state_.dead())
        fail("constrain: token ", id, " (", string_brief(bytes),
             ") breaks the constrained text at its byte ", i);
    }
  }

  // The text every valid continuation starts with, up to `cap` bytes: bytes while exactly one
  // fits and the text may not end before it (jump-forward, serve/forced_tokens.hpp). whole:
  // nothing may follow it but the end of the text. Empty where the next byte is a choice.
  struct Forced {
    std::string text;
    bool whole = false;
  };
  Forced forced_text(int cap = 256) const {
    Forced out;
    if (ended_) return out;
    const Matcher& m = maker_.matcher();
    probe_.copy_from(state_);
    while (static_cast<int>(out.text.size()) < cap && !m.accepts(probe_)) {
      int only = -1;
      for (int b = 0; b < 256 && only != -2; b++) {
        m.feed(probe_, static_cast<uint8_t>(b), probe_next_);
        if (!probe_next_.dead()) only = only == -1 ? b : -2;
      }
      if (only < 0) break;
      out.text.push_back(static_cast<char>(only));
      m.feed(probe_, static_cast<uint8_t>(only), probe_next_);
      std::swap(probe_, probe_next_);
    }
    out.whole = m.complete(probe_);
    return out;
  }
  // The fewest bytes that finish the text after `bytes` more (kInf if they break it).
  int finish_after(std::string_view bytes) const {
    const Matcher& m = maker_.matcher();
    probe_.copy_from(state_);
    for (char c : bytes) {
      m.feed(probe_, static_cast<uint8_t>(c), probe_next_);
      if (probe_next_.dead()) return kInf;
      std::swap(probe_, probe_next_);
    }
    return m.min_finish(probe_);
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
  mutable State probe_, probe_next_;  // forced_text's and finish_after's scratch
  std::string key_;
  std::shared_ptr<const MaskEntry> last_;
  bool ended_ = false;
};

}  // namespace servekit::constrain
