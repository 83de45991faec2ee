// SPDX-License-Identifier: Apache-2.0
#pragma once
// The matcher: where a partial JSON text stands in a Grammar, fed one byte at a time.
//
// A thread is a stack of frames (the open object, the array inside it, the string being
// written, ...); a state is the set of threads still alive, more than one where the text so
// far fits several alternatives (anyOf, an enum's values, an optional key that is a prefix of
// another). A byte that fits no thread kills the state. The state is plain bytes, so that it
// can be a cache key (constrain/token_mask.hpp) and copied cheaply while a token's bytes are
// tried.
//
// min_finish() is the fewest bytes that complete a valid text from here; as every byte is a
// GPT-2 token, it is also the fewest tokens, which is how the engine closes open structures
// when the budget runs out.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "servekit/constrain/finish_length.hpp"
#include "servekit/constrain/grammar.hpp"
#include "servekit/constrain/match_state.hpp"

namespace servekit::constrain {

class Matcher {
 public:
  explicit Matcher(const Grammar& g) : g_(g) {}
  const Grammar& grammar() const { return g_; }

  // The state before any byte.
  void start(State& s) const {
    s.clear();
    Thread& t = s.add();
    t.n = 1;
    t.f[0] = Frame{g_.root, phase::R_START, 0, 0, 0, 0, 0, 0};
  }

  // out = in after byte b (out may not be in); dead if b fits no thread.
  void feed(const State& in, uint8_t b, State& out) const {
    out.clear();
    for (int i = 0; i < in.size; i++) {
      scratch_.copy_from(in.t[i]);
      step(scratch_, b, out);
    }
    dedupe(out);
  }

  // The text could end here (the root value is complete, or is a number that may end).
  bool accepts(const State& s) const {
    for (int i = 0; i < s.size; i++) {
      const Thread& t = s.t[i];
      if (t.top().phase == phase::R_DONE && t.n == 1) return true;
      if (t.n == 2 && ends_here(t.top())) return true;
      if (t.n >= 2 && rules_may_end(t)) return true;
    }
    return false;
  }
  // A grammar's text may end: every frame above the root is a rule that may end.
  bool rules_may_end(const Thread& t) const {
    for (int i = 1; i < t.n; i++)
      if (!rule_may_end(t.f[i])) return false;
    return true;
  }
  // Nothing may follow: every thread has closed the root value.
  bool complete(const State& s) const {
    for (int i = 0; i < s.size; i++)
      if (!(s.t[i].n == 1 && s.t[i].top().phase == phase::R_DONE)) return false;
    return s.size > 0;
  }

  // Fewest bytes that complete a valid text (kInf if none: a dead state).
  int min_finish(const State& s) const {
    int best = kInf;
    for (int i = 0; i < s.size; i++) best = std::min(best, finish::min_finish(g_, s.t[i]));
    return best;
  }

 private:
  const Node& node(const Frame& f) const { return g_.nodes[f.node]; }

  // Completes the top frame: pops it and moves its parent past the value.
  void pop_done(Thread& t) const {
    t.n--;
    Frame& p = t.top();
    switch (node(p).kind) {
      case Kind::Root:
        p.phase = phase::R_DONE;
        break;
      case Kind::Object:
        p.phase = p.phase == phase::O_KEYSTR ? phase::O_COLON : phase::O_AFTER_VALUE;
        break;
      case Kind::Array:
        p.phase = phase::A_AFTER_VALUE, p.count++;
        if (node(p).unique) p.bits |= uint64_t(1) << t.f[t.n].which;
        break;
      default:
        break;
    }
  }

  void emit(const Thread& t, State& out) const { out.add().copy_from(t); }

  // Starts a value of node n in t (a child of t's top) with its first byte b.
  void begin(const Thread& t, int n, uint8_t b, State& out) const {
    const Node& nd = g_.nodes[n];
    if (nd.kind == Kind::AnyOf) {
      for (int a : nd.alts) begin(t, a, b, out);
      return;
    }
    if (nd.kind == Kind::Chars) {  // one byte: done as soon as begun, no frame
      if (!nd.has_byte(b)) return;
      Thread& u = tmp(t);
      if (node(u.top()).kind == Kind::Root) u.top().phase = phase::R_DONE;
      return emit(u, out);
    }
    if (t.n >= kMaxDepth) return;
    if (nd.kind == Kind::Seq || nd.kind == Kind::Repeat) {
      Thread u;
      u.copy_from(t);
      u.f[u.n++] = Frame{n, 0, 0, 0, 0, 0, 0, 0};
      return next_element(u, b, out, false);
    }
    Thread& u = tmp(t);
    Frame f{n, 0, 0, 0, 0, 0, 0, 0};
    switch (nd.kind) {
      case Kind::Object:
        if (b != '{') return;
        f.phase = phase::O_OPEN;
        break;
      case Kind::Array:
        if (b != '[') return;
        f.phase = phase::A_OPEN;
        break;
      case Kind::String:
        if (b != '"') return;
        f.phase = phase::S_BODY;
        if (nd.pattern >= 0) f.bits = g_.patterns[nd.pattern].start();
        break;
      case Kind::Integer:
        if (b == '-') {
          if (nd.lo >= 0) return;
          f.phase = phase::I_MINUS, f.a = 1;
        } else if (b >= '0' && b <= '9') {
          f.phase = b == '0' ? phase::I_ZERO : phase::I_DIGITS, f.count = 1;
          if (nd.bounded()) f.bits = b - '0';
          if (!range::int_feasible(nd, f)) return;
        } else {
          return;
        }
        break;
      case Kind::Number:
        if (b == '-')
          f.phase = phase::N_MINUS, f.a = nd.num.any();
        else if (b == '0')
          f.phase = phase::N_ZERO;
        else if (b >= '1' && b <= '9')
          f.phase = phase::N_INT, f.count = 1;
        else
          return;
        if (nd.num.any()) {
          if (b == '-' && nd.num.lo >= 0) return;
          f.bits = b == '-' ? 0 : b - '0';
          if (!range::number_feasible(nd.num, f)) return;
        }
        break;
      case Kind::Text: {  // never popped: the text goes on until it ends
        f.bits = g_.patterns[nd.pattern].step(g_.patterns[nd.pattern].start(), b);
        if (f.bits == 0) return;
        break;
      }
      case Kind::Literal: {
        // An item of a uniqueItems array: the texts its earlier items used are out.
        const uint64_t used =
            node(t.top()).kind == Kind::Array && node(t.top()).unique ? t.top().bits : 0;
        for (int i = 0; i < static_cast<int>(nd.texts.size()); i++)
          if (static_cast<uint8_t>(nd.texts[i][0]) == b && !(used >> i & 1)) {
            Thread& v = tmp(t);
            v.f[v.n++] = Frame{n, 0, 0, 0, 0, 1, i, 0};
            if (nd.texts[i].size() == 1) pop_done(v);
            emit(v, out);
          }
        return;
      }
      default:
        return;
    }
    u.f[u.n++] = f;
    emit(u, out);
  }

  // A grammar rule's frame (Seq: count elements begun; Repeat: count repetitions begun) takes
  // byte b: its next element starts with it (an element that may be empty may also be passed
  // over), or, where every element left may be empty and may_end, the frame ends and b goes to
  // its parent. Threads are copied on the stack: begin may come back here for nested rules.
  void next_element(const Thread& t, uint8_t b, State& out, bool may_end) const {
    const Frame& f = t.top();
    const Node& nd = node(f);
    if (nd.kind == Kind::Seq) {
      for (int j = f.count; j < static_cast<int>(nd.alts.size()); j++) {
        Thread u;
        u.copy_from(t);
        u.top().count = j + 1;
        begin(u, nd.alts[j], b, out);
        if (g_.min_len[nd.alts[j]] > 0) return;
      }
    } else {
      if (f.count < nd.max_items) {
        Thread u;
        u.copy_from(t);
        // Unbounded, the count matters only up to the minimum: capped there, the states of
        // `x*` repeat, and so do their cached masks.
        if (nd.max_items < kInf || f.count < nd.min_items) u.top().count++;
        begin(u, nd.items, b, out);
      }
      if (!rule_may_end(f)) return;
    }
    if (!may_end) return;
    Thread u;
    u.copy_from(t);
    pop_done(u);
    if (node(u.top()).kind == Kind::Root) return;  // nothing may follow the root's text
    step(u, b, out);
  }
  // A rule's frame may end here: what is left of it may be empty.
  bool rule_may_end(const Frame& f) const {
    const Node& nd = node(f);
    if (nd.kind == Kind::Repeat) return f.count >= nd.min_items || g_.min_len[nd.items] == 0;
    if (nd.kind != Kind::Seq) return false;
    for (int j = f.count; j < static_cast<int>(nd.alts.size()); j++)
      if (g_.min_len[nd.alts[j]] > 0) return false;
    return true;
  }

  // A thread copy to change and emit; each one is emitted (or dropped) before the next is
  // taken, so one slot serves.
  Thread& tmp(const Thread& t) const {
    tmp_.copy_from(t);
    return tmp_;
  }

  void start_key(Thread& t, State& out) const {
    Frame& f = t.top();
    const Node& nd = node(f);
    for (int i = 0; i < static_cast<int>(nd.props.size()); i++)
      if (!(f.bits >> i & 1)) {
        Thread& u = tmp(t);
        u.top().phase = phase::O_KEY, u.top().which = i, u.top().count = 1;
        emit(u, out);
      }
    if (nd.additional >= 0 && t.n < kMaxDepth) {
      Thread& u = tmp(t);
      u.top().phase = phase::O_KEYSTR, u.top().which = -1;
      u.f[u.n++] = Frame{g_.key_node, phase::S_BODY, 0, 0, 0, 0, 0, 0};
      emit(u, out);
    }
    for (int i = 0; i < static_cast<int>(nd.pattern_props.size()) && t.n < kMaxDepth; i++) {
      const int key = nd.pattern_props[i].key;
      Thread& u = tmp(t);
      u.top().phase = phase::O_KEYSTR, u.top().which = -2 - i;
      u.f[u.n++] =
          Frame{key, phase::S_BODY, 0, 0, 0, 0, 0, g_.patterns[g_.nodes[key].pattern].start()};
      emit(u, out);
    }
  }

  bool more_keys(const Frame& f) const {
    const Node& nd = node(f);
    if (nd.additional >= 0 || !nd.pattern_props.empty()) return true;
    return f.bits != (nd.props.size() == 64 ? ~uint64_t(0) : (uint64_t(1) << nd.props.size()) - 1);
  }

  // A uniqueItems array has texts left for another item.
  bool more_items(const Frame& f, const Node& nd) const {
    return !nd.unique || std::popcount(f.bits) < static_cast<int>(g_.nodes[nd.items].texts.size());
  }

  // t (a private copy) after byte b, into out.
  void step(Thread& t, uint8_t b, State& out) const {
    Frame& f = t.top();
    const Node& nd = node(f);
    using namespace phase;
    switch (nd.kind) {
      case Kind::Root:
        if (f.phase != R_START) return;
        f.phase = R_IN;
        return begin(t, nd.items, b, out);
      case Kind::Object:
        switch (f.phase) {
          case O_OPEN:
            if (b == '}' && nd.required == 0) return pop_done(t), emit(t, out);
            if (b == '"') return start_key(t, out);
            return;
          case O_KEY: {
            const std::string& k = nd.props[f.which].key;
            if (static_cast<uint8_t>(k[f.count]) != b) return;
            if (++f.count == static_cast<int>(k.size()))
              f.bits |= uint64_t(1) << f.which, f.phase = O_COLON;
            return emit(t, out);
          }
          case O_COLON:
            if (b != ':') return;
            f.phase = O_AFTER_COLON;
            return emit(t, out);
          case O_AFTER_COLON:
            if (b == ' ') return f.phase = O_COLON_SP, emit(t, out);
            [[fallthrough]];
          case O_COLON_SP:
            f.phase = O_IN;
            return begin(t, finish::value_of(g_, f), b, out);
          case O_AFTER_VALUE:
            if (b == ',' && more_keys(f)) return f.phase = O_COMMA, emit(t, out);
            if (b == '}' && (f.bits & nd.required) == nd.required) return pop_done(t), emit(t, out);
            return;
          case O_COMMA:
            if (b == ' ') return f.phase = O_COMMA_SP, emit(t, out);
            [[fallthrough]];
          case O_COMMA_SP:
            if (b == '"') return start_key(t, out);
            return;
          default:
            return;
        }
      case Kind::Array:
        switch (f.phase) {
          case A_OPEN:
            if (b == ']') {
              if (nd.min_items == 0) pop_done(t), emit(t, out);
              return;
            }
            if (nd.max_items == 0) return;
            f.phase = A_IN;
            return begin(t, nd.item_at(0), b, out);
          case A_AFTER_VALUE:
            if (b == ',' && f.count < nd.max_items && more_items(f, nd))
              return f.phase = A_COMMA, emit(t, out);
            if (b == ']' && f.count >= nd.min_items) return pop_done(t), emit(t, out);
            return;
          case A_COMMA:
            if (b == ' ') return f.phase = A_COMMA_SP, emit(t, out);
            [[fallthrough]];
          case A_COMMA_SP:
            f.phase = A_IN;
            return begin(t, nd.item_at(f.count), b, out);
          default:
            return;
        }
      case Kind::String:
        return string_step(t, f, nd, b, out);
      case Kind::Integer:
        return integer_step(t, f, nd, b, out);
      case Kind::Number:
        if (nd.num.any()) return bounded_number_step(t, f, nd, b, out);
        return number_step(t, f, b, out);
      case Kind::Literal: {
        const std::string& s = nd.texts[f.which];
        if (static_cast<uint8_t>(s[f.count]) != b) return;
        if (++f.count == static_cast<int>(s.size())) pop_done(t);
        return emit(t, out);
      }
      case Kind::Text:
        f.bits = g_.patterns[nd.pattern].step(f.bits, b);
        if (f.bits != 0) emit(t, out);
        return;
      case Kind::Seq:
      case Kind::Repeat:
        return next_element(t, b, out, true);
      default:
        return;
    }
  }

  void string_step(Thread& t, Frame& f, const Node& nd, uint8_t b, State& out) const {
    using namespace phase;
    const Pattern* pat = nd.pattern >= 0 ? &g_.patterns[nd.pattern] : nullptr;
    auto one_more = [&] {
      if (f.count >= nd.max_len) return false;
      f.count = std::min(f.count + 1, nd.len_cap());
      return true;
    };
    switch (f.phase) {
      case S_BODY:
        if (b == '"') {
          if (f.count < nd.min_len || (pat && !pat->accepts(f.bits))) return;
          return pop_done(t), emit(t, out);
        }
        if (pat) {
          const uint64_t s = pat->step(f.bits, b);
          if (s == 0 || !one_more()) return;
          // The pattern must still fit in the characters maxLength leaves.
          if (nd.max_len < kInf && pat->chars_needed(s) > nd.max_len - f.count) return;
          f.bits = s;
          return emit(t, out);
        }
        if (b == '\\') return one_more() ? (f.phase = S_ESC, emit(t, out)) : void();
        if (b < 0x20) return;
        if (b < 0x80) return one_more() ? emit(t, out) : void();
        // A UTF-8 lead byte, and the range its next byte must fall in (no overlong forms,
        // no surrogates, nothing past U+10FFFF).
        if (b >= 0xC2 && b <= 0xDF)
          f.a = 1, f.b = 0x80, f.c = 0xBF;
        else if (b == 0xE0)
          f.a = 2, f.b = 0xA0, f.c = 0xBF;
        else if (b == 0xED)
          f.a = 2, f.b = 0x80, f.c = 0x9F;
        else if (b >= 0xE1 && b <= 0xEF)
          f.a = 2, f.b = 0x80, f.c = 0xBF;
        else if (b == 0xF0)
          f.a = 3, f.b = 0x90, f.c = 0xBF;
        else if (b >= 0xF1 && b <= 0xF3)
          f.a = 3, f.b = 0x80, f.c = 0xBF;
        else if (b == 0xF4)
          f.a = 3, f.b = 0x80, f.c = 0x8F;
        else
          return;
        if (!one_more()) return;
        f.phase = S_CONT;
        return emit(t, out);
      case S_CONT:
        if (b < f.b || b > f.c) return;
        f.b = 0x80, f.c = 0xBF;
        if (--f.a == 0) f.phase = S_BODY;
        return emit(t, out);
      case S_ESC:
        if (b == 'u') return f.phase = S_HEX, f.a = 0, emit(t, out);
        if (!std::strchr("\"\\/bfnrt", b) || b == 0) return;
        f.phase = S_BODY;
        return emit(t, out);
      case S_HEX: {
        const bool hex = (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
        // No surrogate halves (\uD800-\uDFFF): a lone one is not a character.
        if (!hex || (f.a == 0 && (b == 'd' || b == 'D'))) return;
        if (++f.a == 4) f.phase = S_BODY, f.a = 0;
        return emit(t, out);
      }
      default:
        return;
    }
  }

  bool ends_here(const Frame& f) const {
    const Node& nd = node(f);
    using namespace phase;
    if (nd.kind == Kind::Integer)
      return (f.phase == I_ZERO || f.phase == I_DIGITS) && range::int_in_range(nd, f);
    if (nd.kind == Kind::Number && nd.num.any()) return range::number_in_range(nd.num, f);
    if (nd.kind == Kind::Number)
      return f.phase == N_ZERO || f.phase == N_INT || f.phase == N_FRAC || f.phase == N_EXP;
    if (nd.kind == Kind::Text) return g_.patterns[nd.pattern].accepts(f.bits);
    return false;
  }

  // A number ends at the first byte that cannot continue it: that byte goes to the parent.
  void end_number(Thread& t, uint8_t b, State& out) const {
    if (!ends_here(t.top())) return;
    pop_done(t);
    if (node(t.top()).kind == Kind::Root) return;  // nothing may follow the root value
    step(t, b, out);
  }

  void integer_step(Thread& t, Frame& f, const Node& nd, uint8_t b, State& out) const {
    using namespace phase;
    const bool digit = b >= '0' && b <= '9';
    if (digit && f.phase != I_ZERO && f.count < 18) {
      Frame g = f;
      if (f.phase == I_MINUS)
        g.phase = b == '0' ? I_ZERO : I_DIGITS, g.count = 1;
      else
        g.count++;
      if (nd.bounded()) g.bits = f.bits * 10 + (b - '0');
      if (range::int_feasible(nd, g)) {
        Thread& u = tmp(t);
        u.top() = g;
        emit(u, out);
      }
      return;
    }
    end_number(t, b, out);
  }

  void number_step(Thread& t, Frame& f, uint8_t b, State& out) const {
    using namespace phase;
    const bool digit = b >= '0' && b <= '9';
    auto go = [&](uint8_t p, int count) {
      f.phase = p, f.count = count;
      emit(t, out);
    };
    switch (f.phase) {
      case N_MINUS:
        if (b == '0') return go(N_ZERO, 0);
        if (digit) return go(N_INT, 1);
        return;
      case N_ZERO:
      case N_INT:
        if (digit && f.phase == N_INT && f.count < 15) return go(N_INT, f.count + 1);
        if (b == '.') return go(N_DOT, 0);
        if (b == 'e' || b == 'E') return go(N_E, 0);
        return end_number(t, b, out);
      case N_DOT:
        if (digit) return go(N_FRAC, 1);
        return;
      case N_FRAC:
        if (digit && f.count < 15) return go(N_FRAC, f.count + 1);
        if (b == 'e' || b == 'E') return go(N_E, 0);
        return end_number(t, b, out);
      case N_E:
        if (b == '+' || b == '-') return go(N_ESIGN, 0);
        [[fallthrough]];
      case N_ESIGN:
        if (digit) return go(N_EXP, 1);
        return;
      case N_EXP:
        if (digit && f.count < 2) return go(N_EXP, f.count + 1);
        return end_number(t, b, out);
      default:
        return;
    }
  }

  // A number with a range (constrain/number_range.hpp): no exponent, and every digit keeps a
  // value in range within reach.
  void bounded_number_step(Thread& t, Frame& f, const Node& nd, uint8_t b, State& out) const {
    using namespace phase;
    const bool digit = b >= '0' && b <= '9';
    Frame g = f;
    switch (f.phase) {
      case N_MINUS:
        if (!digit) return;
        g.phase = b == '0' ? N_ZERO : N_INT, g.count = b != '0', g.bits = b - '0';
        break;
      case N_ZERO:
      case N_INT:
        if (digit && f.phase == N_INT && f.count < range::kIntDigits) {
          g.count++, g.bits = f.bits * 10 + (b - '0');
        } else if (b == '.') {
          g.phase = N_DOT, g.b = f.phase == N_ZERO ? 1 : f.count, g.count = 0;
        } else {
          return end_number(t, b, out);
        }
        break;
      case N_DOT:
      case N_FRAC:
        if (digit && f.count < range::frac_max(f.b)) {
          g.phase = N_FRAC, g.count++, g.bits = f.bits * 10 + (b - '0');
        } else if (f.phase == N_FRAC) {
          return end_number(t, b, out);
        } else {
          return;
        }
        break;
      default:
        return;
    }
    if (!range::number_feasible(nd.num, g)) return;
    f = g;
    emit(t, out);
  }

  static void dedupe(State& s) {
    for (int i = 1; i < s.size;) {
      bool dup = false;
      for (int j = 0; j < i && !dup; j++) dup = s.t[j].same(s.t[i]);
      if (dup) {
        std::swap(s.t[i], s.t[s.size - 1]);
        s.size--;
      } else {
        i++;
      }
    }
  }

  const Grammar& g_;
  // Scratch (so a Matcher serves one thread of work at a time).
  mutable Thread tmp_, scratch_;
};

}  // namespace servekit::constrain
