// SPDX-License-Identifier: Apache-2.0
#pragma once
// How far a matcher thread is from a complete JSON text: the fewest bytes that close each of
// its open frames (Matcher::min_finish).
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "servekit/constrain/grammar_graph.hpp"
#include "servekit/constrain/match_state.hpp"
#include "servekit/constrain/number_range.hpp"

namespace servekit::constrain::finish {

inline int len(const Grammar& g, int n) {
  return g.min_len[n];
}

// The shortest texts of an array's items at positions a..b-1 (prefixItems, then items; for
// uniqueItems, the shortest texts not `used` yet).
inline long item_lens(const Grammar& g, const Node& nd, long a, long b, uint64_t used = 0) {
  if (nd.unique) {  // the item texts are shortest first (Compiler::unique_items)
    const auto& texts = g.nodes[nd.items].texts;
    long k = std::max(0L, b - a), sum = 0;
    for (std::size_t i = 0; i < texts.size() && k > 0; i++)
      if (!(used >> i & 1)) sum += static_cast<long>(texts[i].size()), k--;
    return k > 0 ? kInf : sum;
  }
  const long p = static_cast<long>(nd.prefix.size());
  long sum = 0;
  for (long k = a; k < std::min(b, p); k++) sum += len(g, nd.prefix[k]);
  const long rest = std::max(0L, b - std::max(a, p));
  return rest == 0 ? sum : sum + rest * len(g, nd.items);
}

// The value node of the key frame f is writing: a listed property's (which >= 0), another
// key's (-1) or a pattern property's (-2 - i).
inline int value_of(const Grammar& g, const Frame& f) {
  const Node& nd = g.nodes[f.node];
  if (f.which >= 0) return nd.props[f.which].value;
  return f.which == -1 ? nd.additional : nd.pattern_props[-2 - f.which].value;
}

// The object's required keys not yet written (but `skip`): their bytes (key, ':', shortest
// value) and how many.
inline std::pair<long, long> required_left(const Grammar& g, const Frame& f, int skip = -1) {
  const Node& nd = g.nodes[f.node];
  long sum = 0, k = 0;
  for (int i = 0; i < static_cast<int>(nd.props.size()); i++)
    if ((nd.required >> i & 1) && !(f.bits >> i & 1) && i != skip)
      sum += nd.props[i].key.size() + 1 + len(g, nd.props[i].value), k++;
  return {sum, k};
}

// Bytes to close frame f. A frame below the top is in a phase whose child value is open:
// the child's frame counts that value, this one what follows it (`child`: the text a
// uniqueItems array's open item is writing, which the later items may not use).
inline long rest(const Grammar& g, const Frame& f, uint64_t child = 0) {
  const Node& nd = g.nodes[f.node];
  using namespace phase;
  switch (nd.kind) {
    case Kind::Root:
      return f.phase != R_START ? 0 : g.start_len >= 0 ? g.start_len : len(g, nd.items);
    case Kind::Object: {
      auto [sum, k] = required_left(g, f);
      const long close = sum + k + 1;  // ", key:value" for each, then '}'
      switch (f.phase) {
        case O_OPEN:
          return k == 0 ? 1 : sum + (k - 1) + 1;
        case O_KEY: {
          auto [s2, k2] = required_left(g, f, f.which);
          const Property& p = nd.props[f.which];
          return long(p.key.size()) - f.count + 1 + len(g, p.value) + s2 + k2 + 1;
        }
        case O_KEYSTR:
          return 1 + len(g, value_of(g, f)) + close;
        case O_COLON:
          return 1 + len(g, value_of(g, f)) + close;
        case O_AFTER_COLON:
        case O_COLON_SP:
          return len(g, value_of(g, f)) + close;
        case O_IN:
        case O_AFTER_VALUE:
          return close;
        case O_COMMA:
        case O_COMMA_SP: {
          if (k > 0) return sum + (k - 1) + 1;
          long one = kInf;
          for (int i = 0; i < static_cast<int>(nd.props.size()); i++)
            if (!(f.bits >> i & 1))
              one = std::min<long>(one, nd.props[i].key.size() + 1 + len(g, nd.props[i].value));
          if (nd.additional >= 0) one = std::min<long>(one, 3 + len(g, nd.additional));
          for (const PatternProperty& pp : nd.pattern_props)
            one = std::min<long>(one, len(g, pp.key) + 1 + len(g, pp.value));
          return one + 1;
        }
        default:
          return kInf;
      }
    }
    case Kind::Array: {
      // Positions a..b-1: their shortest items and a comma before each.
      auto with_commas = [&](long a, long b) {
        return item_lens(g, nd, a, b, f.bits | child) + std::max(0L, b - a);
      };
      const long m = nd.min_items, c = f.count;
      switch (f.phase) {
        case A_OPEN:
          return m == 0 ? 1 : with_commas(0, m) - 1 + 1;
        case A_IN:
          return with_commas(c + 1, std::max(c + 1, m)) + 1;
        case A_AFTER_VALUE:
          return with_commas(c, std::max(c, m)) + 1;
        case A_COMMA:
        case A_COMMA_SP:
          return with_commas(c, c + std::max(1L, m - c)) - 1 + 1;
        default:
          return kInf;
      }
    }
    case Kind::String: {
      long need = std::max(0, nd.min_len - f.count);
      if (nd.pattern >= 0) need = std::max<long>(need, g.patterns[nd.pattern].chars_needed(f.bits));
      switch (f.phase) {
        case S_BODY:
          return need + 1;
        case S_ESC:
          return 1 + need + 1;
        case S_HEX:
          return (4 - f.a) + need + 1;
        case S_CONT:
          return f.a + need + 1;
        default:
          return kInf;
      }
    }
    case Kind::Integer:
      if (f.phase == I_MINUS) {
        long best = kInf;
        for (int d = 0; d <= 9; d++) {
          Frame g = f;
          g.phase = d == 0 ? I_ZERO : I_DIGITS, g.count = 1, g.bits = nd.bounded() ? d : 0;
          best = std::min<long>(best, 1 + range::int_more_digits(nd, g));
        }
        return best;
      }
      return range::int_more_digits(nd, f);
    case Kind::Number:
      if (nd.num.any()) return range::num_more_bytes(nd.num, f);
      switch (f.phase) {
        case N_MINUS:
        case N_DOT:
        case N_E:
        case N_ESIGN:
          return 1;
        default:
          return 0;
      }
    case Kind::Literal:
      return long(nd.texts[f.which].size()) - f.count;
    case Kind::Text:
      return g.patterns[nd.pattern].chars_needed(f.bits);
    case Kind::Seq: {  // the elements not begun
      long sum = 0;
      for (int j = f.count; j < static_cast<int>(nd.alts.size()); j++) sum += len(g, nd.alts[j]);
      return sum;
    }
    case Kind::Repeat:
      return std::max(0L, static_cast<long>(nd.min_items) - f.count) * len(g, nd.items);
    default:
      return kInf;
  }
}

inline int min_finish(const Grammar& g, const Thread& t) {
  long sum = 0;
  for (int i = 0; i < t.n; i++) {
    const bool unique_item = i + 1 < t.n && g.nodes[t.f[i].node].unique;
    sum += rest(g, t.f[i], unique_item ? uint64_t(1) << t.f[i + 1].which : 0);
  }
  return static_cast<int>(std::min<long>(sum, kInf));
}

}  // namespace servekit::constrain::finish
