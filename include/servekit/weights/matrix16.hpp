// SPDX-License-Identifier: Apache-2.0
#pragma once
// The storage shared by the 16-bit float formats (fp16, bf16): one (K, N) array rounded to
// nearest even at load; the linear kernels widen each row to fp32 as it streams.
#include <cstddef>
#include <string_view>
#include <vector>

#include "servekit/core/error.hpp"

namespace servekit::weights {

// Self: the Matrix<Fmt> deriving from this; T: the stored element; Narrow/Widen: its
// conversions from and to fp32.
template <class Self, class T, T (*Narrow)(float), float (*Widen)(T)>
struct Matrix16 {
  std::vector<T> data;  // (K, N)
  int rows = 0;         // K: input features
  int cols = 0;         // N: output features

  static Self from_f32(std::vector<float> w, int K, int N, std::string_view name = "") {
    if (w.size() != static_cast<std::size_t>(K) * N)
      fail("weights ", name, ": ", w.size(), " values for a (", K, ", ", N, ") matrix");
    Self m;
    m.rows = K, m.cols = N;
    m.data.resize(w.size());
    for (std::size_t i = 0; i < w.size(); i++) m.data[i] = Narrow(w[i]);
    return m;
  }
  std::size_t bytes() const { return data.size() * sizeof(T); }
  std::size_t state_bytes() const { return 0; }
  float dequant(int k, int n) const { return Widen(data[static_cast<std::size_t>(k) * cols + n]); }
};

}  // namespace servekit::weights
