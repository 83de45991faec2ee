// SPDX-License-Identifier: Apache-2.0
#pragma once
// The (cols, rows) transpose of a row-major (rows, cols) fp32 array. The output projection
// is stored (V, C) in a checkpoint and read as a (K, N) = (C, V) linear in a weight format,
// so the model transposes it once at load. 32 x 32 tiles keep both sides in cache lines.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace servekit::weights {

inline std::vector<float> transposed(const std::vector<float>& a, int rows, int cols) {
  constexpr int T = 32;
  std::vector<float> t(a.size());
  for (int r0 = 0; r0 < rows; r0 += T)
    for (int c0 = 0; c0 < cols; c0 += T)
      for (int r = r0; r < std::min(rows, r0 + T); r++)
        for (int c = c0; c < std::min(cols, c0 + T); c++)
          t[static_cast<std::size_t>(c) * rows + r] = a[static_cast<std::size_t>(r) * cols + c];
  return t;
}

}  // namespace servekit::weights
