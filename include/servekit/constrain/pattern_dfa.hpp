// SPDX-License-Identifier: Apache-2.0
#pragma once
// A string pattern's position sets (constrain/pattern.hpp) numbered as they are met, with their
// transitions filled in as they are taken: the pattern as a DFA, built lazily, so that a mask
// walking thousands of tokens through a pattern pays a table lookup per byte, not a pass over
// the pattern's atoms (token_mask.hpp).
#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "servekit/constrain/pattern.hpp"

namespace servekit::constrain {

class PatternDfa {
 public:
  static constexpr int32_t kDead = -1;

  explicit PatternDfa(const Pattern& p) : p_(p) {}

  int32_t state(uint64_t bits) {
    if (bits == 0) return kDead;
    auto [it, fresh] = ids_.try_emplace(bits, static_cast<int32_t>(bits_.size()));
    if (fresh) {
      bits_.push_back(bits);
      need_.push_back(p_.chars_needed(bits));
      next_.emplace_back();
      next_.back().fill(kUnknown);
    }
    return it->second;
  }

  // The state after character b (ASCII; anything else ends every position).
  int32_t next(int32_t s, uint8_t b) {
    if (b >= 128) return kDead;
    int32_t& n = next_[s][b];
    if (n == kUnknown) {
      const int32_t m = state(p_.step(bits_[s], b));  // may grow next_: no reference across it
      next_[s][b] = m;
      return m;
    }
    return n;
  }

  uint64_t bits(int32_t s) const { return bits_[s]; }
  int chars_needed(int32_t s) const { return need_[s]; }

 private:
  static constexpr int32_t kUnknown = -2;
  const Pattern& p_;
  std::unordered_map<uint64_t, int32_t> ids_;
  std::vector<uint64_t> bits_;
  std::vector<int> need_;
  std::vector<std::array<int32_t, 128>> next_;
};

}  // namespace servekit::constrain
