// SPDX-License-Identifier: Apache-2.0
#pragma once
// The shortest JSON text of each node of a grammar (Grammar::min_len), which the matcher
// compares with the tokens a request has left, so that every value it starts can end in time.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "servekit/constrain/finish_length.hpp"
#include "servekit/constrain/grammar_graph.hpp"
#include "servekit/constrain/number_range.hpp"

namespace servekit::constrain::detail {

// Shortest text of each node, by iterating to a fixed point (references may loop).
inline void min_lengths(Grammar& g) {
  auto& m = g.min_len;
  m.assign(g.nodes.size(), kInf);
  auto sat = [](long v) { return static_cast<int>(std::min<long>(v, kInf)); };
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t i = 0; i < g.nodes.size(); i++) {
      const Node& n = g.nodes[i];
      long v = kInf;
      switch (n.kind) {
        case Kind::Root:
          v = n.items >= 0 ? m[n.items] : kInf;
          break;
        case Kind::Object: {
          long sum = 2, k = 0;
          for (std::size_t p = 0; p < n.props.size(); p++)
            if (n.required >> p & 1) sum += n.props[p].key.size() + 1 + m[n.props[p].value], k++;
          v = sum + std::max(0L, k - 1);
          break;
        }
        case Kind::Array:
          v = 2 + std::max(0L, static_cast<long>(n.min_items) - 1) +
              finish::item_lens(g, n, 0, n.min_items);
          break;
        case Kind::String:
          v = 2 + std::max(n.min_len, n.pattern >= 0 ? g.patterns[n.pattern].chars_needed(
                                                           g.patterns[n.pattern].start())
                                                     : 0);
          break;
        case Kind::Integer:
          v = range::integer_shortest(n);
          break;
        case Kind::Number:
          v = n.num.any() ? range::number_shortest(n.num) : 1;
          break;
        case Kind::Literal:
          for (const auto& t : n.texts) v = std::min<long>(v, t.size());
          break;
        case Kind::AnyOf:
          for (int a : n.alts) v = std::min<long>(v, m[a]);
          break;
        case Kind::Text:  // at least one character: an empty text cannot be generated
          v = g.patterns[n.pattern].shortest_nonempty();
          break;
        case Kind::Seq:
          v = 0;
          for (int e : n.alts) v = std::min<long>(v + m[e], kInf);
          break;
        case Kind::Repeat:
          v = n.min_items == 0 ? 0 : std::min<long>(long(n.min_items) * m[n.items], kInf);
          break;
        case Kind::Chars:
          v = 1;
          break;
      }
      if (sat(v) < m[i]) m[i] = sat(v), changed = true;
    }
  }
}

}  // namespace servekit::constrain::detail
