// SPDX-License-Identifier: Apache-2.0
#pragma once
// Making one token mask: which of the vocabulary's tokens keep a matcher state alive (and, with
// a budget, completable in time). constrain/token_mask.hpp caches the masks per state.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <memory>
#include <vector>

#include "servekit/constrain/finish_length.hpp"
#include "servekit/constrain/grammar_graph.hpp"
#include "servekit/constrain/matcher.hpp"
#include "servekit/constrain/pattern_dfa.hpp"
#include "servekit/constrain/sorted_strings.hpp"
#include "servekit/constrain/string_tokens.hpp"
#include "servekit/constrain/vocab.hpp"

namespace servekit::constrain {

struct MaskEntry {
  std::vector<uint32_t> words;  // (Vocab::words) bit v: token v allowed
  int max_fin = 0;              // the most bytes any allowed token leaves to finish
  int allowed = 0;              // allowed tokens, end-of-text included
};

// Computes masks; one per thread of work (its matcher and per-depth states are scratch).
//
// A state's threads are independent (a token is allowed if some thread survives it), so the
// mask is the union of its threads' masks: a thread inside a plain string takes the string's
// precomputed tokens (string_tokens.hpp), the others walk the vocabulary's trie together.
class MaskMaker {
 public:
  MaskMaker(const Grammar& g, const Vocab& v) : m_(g), v_(v) {}

  // The tokens allowed after state s; budget: only those that leave a text completable within
  // budget - 1 more tokens (kInf: no limit). Empty if none. max_fin may exceed the exact figure
  // (a token two threads allow counts the larger), which only asks for a budgeted mask sooner.
  MaskEntry make(const State& s, int budget) {
    MaskEntry e;
    e.words.assign(v_.words(), 0);
    const bool eos = v_.eos >= 0 && v_.eos < v_.V;
    if (m_.complete(s)) {
      if (eos) allow(e, v_.eos);
      e.allowed = eos ? 1 : 0;
      return e;
    }
    if (eos && m_.accepts(s)) allow(e, v_.eos);
    others_.clear();
    for (int i = 0; i < s.size; i++) {
      const Thread& t = s.t[i];
      if (node(t.top()).kind == Kind::Text)
        pattern_thread(t, budget, e);
      else if (!in_string_body(t))
        others_.add().copy_from(t);
      else if (node(t.top()).pattern < 0)
        string_thread(t, budget, e);
      else
        pattern_thread(t, budget, e);
    }
    if (!others_.dead())
      walk(v_.tokens, others_, [&](int i, const State& after) {
        const int fin = m_.min_finish(after);
        if (fin > budget - 1) return;
        allow(e, v_.ids[i]);
        e.max_fin = std::max(e.max_fin, fin);
      });
    for (uint32_t w : e.words) e.allowed += std::popcount(w);
    return e;
  }

  const Matcher& matcher() const { return m_; }

 private:
  static void allow(MaskEntry& e, int32_t id) { e.words[id >> 5] |= 1u << (id & 31); }

  const Node& node(const Frame& f) const { return m_.grammar().nodes[f.node]; }

  // Inside a string, after a whole character.
  bool in_string_body(const Thread& t) const {
    const Frame& f = t.top();
    return node(f).kind == Kind::String && f.phase == phase::S_BODY;
  }

  // Calls on(i, state after string i) for each of the strings that s survives.
  template <class F>
  void walk(const SortedStrings& ss, const State& s, F&& on) {
    if (static_cast<int>(depth_.size()) < ss.max_len + 1) depth_.resize(ss.max_len + 1);
    depth_[0].copy_from(s);
    const auto* bytes = reinterpret_cast<const uint8_t*>(ss.bytes.data());
    int valid = 0;  // depth_[0..valid] hold the states after the previous string's prefixes
    for (int i = 0; i < ss.size();) {
      valid = std::min<int>(valid, ss.lcp[i]);
      const int len = ss.length(i);
      const uint8_t* b = bytes + ss.off[i];
      int dead = 0;
      for (int d = valid + 1; d <= len; d++) {
        m_.feed(depth_[d - 1], b[d - 1], depth_[d]);
        valid = d;
        if (depth_[d].dead()) {
          dead = d;
          break;
        }
      }
      if (dead > 0) {
        i = static_cast<int>(ss.skip[ss.off[i] + dead - 1]);  // past every string with this prefix
        continue;
      }
      on(i, depth_[len]);
      i++;
    }
  }

  // Thread t is inside a string without a pattern, after a whole character.
  void string_thread(const Thread& t, int budget, MaskEntry& e) {
    const StringTokens& st = v_.in_string;
    const Grammar& g = m_.grammar();
    const Frame& f = t.top();
    const Node& nd = node(f);
    const int c = f.count;
    const int room = nd.max_len < kInf ? nd.max_len - c : kInf;        // characters that still fit
    const long below = finish::min_finish(g, t) - finish::rest(g, f);  // the enclosing frames
    auto need = [&](int chars) { return std::max(0, nd.min_len - c - chars); };
    // The tokens that stay inside: fin = below + tail + need + 1 (the closing quote).
    long worst = -1;
    for (int tail = 0; tail < StringTokens::kTails; tail++)
      if (st.cmin[tail] < kInf && st.cmin[tail] <= room)
        worst = std::max<long>(worst, tail + need(st.cmin[tail]));
    if (worst >= 0) {
      const long fin = below + worst + 1;
      if (fin <= budget - 1) {  // all of them that fit
        const auto& words = st.upto[std::min(room, st.max_chars())];
        for (std::size_t w = 0; w < words.size(); w++) e.words[w] |= words[w];
        e.max_fin = std::max<int>(e.max_fin, static_cast<int>(std::min<long>(fin, kInf)));
      } else {
        for (const auto& in : st.inside) {
          if (in.chars > room) break;
          const long f_in = below + in.tail + need(in.chars) + 1;
          if (f_in > budget - 1) continue;
          allow(e, in.id);
          e.max_fin = std::max<int>(e.max_fin, static_cast<int>(f_in));
        }
      }
    }
    // The tokens that close it: the same state after the quote for all that have enough
    // characters (and not too many), then what follows the quote in each.
    const int lo = need(0), hi = room;
    if (lo > hi || st.closers.empty()) return;
    closing_.clear();
    Thread& u = closing_.add();
    u.copy_from(t);
    u.top().count = std::min(c + lo, nd.len_cap());
    m_.feed(closing_, '"', quoted_);
    if (quoted_.dead()) return;
    walk(st.after, quoted_, [&](int gi, const State& after) {
      const int fin = m_.min_finish(after);
      if (fin > budget - 1) return;
      for (uint32_t k = st.group_off[gi]; k < st.group_off[gi + 1]; k++) {
        const auto& cl = st.closers[k];
        if (cl.chars < lo || cl.chars > hi) continue;
        allow(e, cl.id);
        e.max_fin = std::max(e.max_fin, fin);
      }
    });
  }

  // Thread t is inside a string with a pattern, after a whole character, or in a text a
  // pattern matches (Kind::Text). A pattern's characters are ASCII, a byte each, so the walk
  // follows the pattern's DFA alone; in a string, up to a quote, where the matcher takes the
  // token's other bytes (a text has no end but the end of text).
  void pattern_thread(const Thread& t, int budget, MaskEntry& e) {
    const Grammar& g = m_.grammar();
    const Frame& f = t.top();
    const Node& nd = node(f);
    const bool text = nd.kind == Kind::Text;
    PatternDfa& dfa = dfa_of(nd.pattern);
    const int c = f.count;
    const bool bounded = nd.max_len < kInf;
    const long below = finish::min_finish(g, t) - finish::rest(g, f);
    const SortedStrings& ss = v_.tokens;
    if (static_cast<int>(pat_.size()) < ss.max_len + 1) pat_.resize(ss.max_len + 1);
    pat_[0] = dfa.state(f.bits);
    const auto* bytes = reinterpret_cast<const uint8_t*>(ss.bytes.data());
    int valid = 0;  // pat_[0..valid]: the pattern's states after the previous token's prefixes
    for (int i = 0; i < ss.size();) {
      valid = std::min<int>(valid, ss.lcp[i]);
      const int len = ss.length(i);
      const uint8_t* b = bytes + ss.off[i];
      int dead = 0, quote = 0;
      for (int d = valid + 1; d <= len; d++) {
        if (b[d - 1] == '"' && !text) {
          quote = d;
          break;
        }
        const int32_t nx = dfa.next(pat_[d - 1], b[d - 1]);
        if (nx == PatternDfa::kDead ||
            (bounded && (c + d > nd.max_len || dfa.chars_needed(nx) > nd.max_len - (c + d)))) {
          dead = d;
          break;
        }
        pat_[d] = nx, valid = d;
      }
      if (quote > 0) {  // the string closes at byte quote - 1: the matcher goes on
        closing_.clear();
        Thread& u = closing_.add();
        u.copy_from(t);
        u.top().bits = dfa.bits(pat_[quote - 1]);
        u.top().count = std::min(c + quote - 1, nd.len_cap());
        m_.feed(closing_, '"', quoted_);
        if (quoted_.dead()) {
          i = static_cast<int>(ss.skip[ss.off[i] + quote - 1]);
          continue;
        }
        for (int d = quote; d < len && !quoted_.dead(); d++) {
          m_.feed(quoted_, b[d], closing_);
          std::swap(quoted_, closing_);
        }
        if (!quoted_.dead()) {
          const int fin = m_.min_finish(quoted_);
          if (fin <= budget - 1) allow(e, v_.ids[i]), e.max_fin = std::max(e.max_fin, fin);
        }
        i++;
        continue;
      }
      if (dead > 0) {
        i = static_cast<int>(ss.skip[ss.off[i] + dead - 1]);
        continue;
      }
      const long need = std::max(std::max(0, nd.min_len - c - len), dfa.chars_needed(pat_[len]));
      const long fin = below + need + (text ? 0 : 1);  // a string's closing quote
      if (fin <= budget - 1) allow(e, v_.ids[i]), e.max_fin = std::max<int>(e.max_fin, fin);
      i++;
    }
  }

  PatternDfa& dfa_of(int pattern) {
    if (static_cast<int>(dfas_.size()) <= pattern) dfas_.resize(pattern + 1);
    if (!dfas_[pattern])
      dfas_[pattern] = std::make_unique<PatternDfa>(m_.grammar().patterns[pattern]);
    return *dfas_[pattern];
  }

  Matcher m_;
  const Vocab& v_;
  std::vector<int32_t> pat_;                       // (max_len + 1) pattern states by prefix
  std::vector<std::unique_ptr<PatternDfa>> dfas_;  // by pattern, built as walked
  std::vector<State> depth_;                       // (max_len + 1) states after each prefix length
  State others_, closing_, quoted_;                // scratch
};

}  // namespace servekit::constrain
