// SPDX-License-Identifier: Apache-2.0
#pragma once
// Byte strings sorted, so that walking them in order walks their trie: a string shares a prefix
// with the one before it (lcp), so the states along that prefix are kept, and `skip` says where
// the strings that start with a given prefix end, so that a prefix no state survives passes
// over every string that starts with it in one jump (a vocabulary's tokens: token_mask.hpp).
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "servekit/core/error.hpp"

namespace servekit::constrain {

struct SortedStrings {
  std::vector<uint32_t> off;   // (n + 1) into bytes
  std::vector<uint16_t> lcp;   // (n) bytes shared with the string before
  std::vector<uint32_t> skip;  // (bytes) at off[i] + d - 1: the first j > i not starting with
                               // string i's first d bytes
  std::string bytes;
  int max_len = 0;

  int size() const { return static_cast<int>(lcp.size()); }
  int length(int i) const { return static_cast<int>(off[i + 1] - off[i]); }
  std::string_view at(int i) const { return std::string_view(bytes).substr(off[i], length(i)); }

  // From strings in byte order (std::string_view's <), each at most 65535 bytes.
  static SortedStrings of(const std::vector<std::string_view>& sorted) {
    SortedStrings s;
    s.off.push_back(0);
    std::string_view prev;
    for (std::string_view t : sorted) {
      if (t.size() > 65535) fail("constrain: a token of ", t.size(), " bytes");
      std::size_t l = 0;
      while (l < t.size() && l < prev.size() && t[l] == prev[l]) l++;
      s.lcp.push_back(static_cast<uint16_t>(l));
      s.bytes += t;
      s.off.push_back(static_cast<uint32_t>(s.bytes.size()));
      s.max_len = std::max(s.max_len, static_cast<int>(t.size()));
      prev = t;
    }
    // From the back: string i+1 shares i's first d bytes iff lcp[i+1] >= d, and then their
    // subtrees at depth d end at the same place.
    const int n = s.size();
    s.skip.assign(s.bytes.size(), 0);
    for (int i = n - 1; i >= 0; i--)
      for (int d = 1; d <= s.length(i); d++)
        s.skip[s.off[i] + d - 1] = i + 1 < n && s.lcp[i + 1] >= d ? s.skip[s.off[i + 1] + d - 1]
                                                                  : static_cast<uint32_t>(i + 1);
    return s;
  }
};

}  // namespace servekit::constrain
