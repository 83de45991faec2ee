// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the compiler asks of patterns before it takes patternProperties: whether a key matches
// one, and whether two can claim the same key. An object's key must get one value schema, so
// servekit takes pattern keys only where no string matches two patterns or a pattern and a
// listed property (JSON schema would ask the value to satisfy both).
#include <cstdint>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "servekit/constrain/pattern.hpp"

namespace servekit::constrain {

inline bool key_matches(const Pattern& p, std::string_view s) {
  uint64_t x = p.start();
  for (char c : s)
    if ((x = p.step(x, static_cast<uint8_t>(c))) == 0) return false;
  return p.accepts(x);
}

enum class Meet { No, Yes, Unknown };

// Whether some string matches both: a search over pairs of states (the product automaton),
// given up past `cap` pairs.
inline Meet patterns_meet(const Pattern& a, const Pattern& b, std::size_t cap = 1 << 16) {
  std::set<std::pair<uint64_t, uint64_t>> seen{{a.start(), b.start()}};
  std::vector<std::pair<uint64_t, uint64_t>> todo{{a.start(), b.start()}};
  while (!todo.empty()) {
    const auto [x, y] = todo.back();
    todo.pop_back();
    if (a.accepts(x) && b.accepts(y)) return Meet::Yes;
    for (int c = 0; c < 128; c++) {
      const uint64_t x2 = a.step(x, c), y2 = b.step(y, c);
      if (x2 == 0 || y2 == 0 || !seen.insert({x2, y2}).second) continue;
      if (seen.size() > cap) return Meet::Unknown;
      todo.push_back({x2, y2});
    }
  }
  return Meet::No;
}

}  // namespace servekit::constrain
