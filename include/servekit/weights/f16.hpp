// SPDX-License-Identifier: Apache-2.0
#pragma once
// fp16 weights: half the bytes of fp32, rounded to nearest even at load. The linear kernel
// widens each row block to fp32 as it streams.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "servekit/core/dtype.hpp"
#include "servekit/core/error.hpp"
#include "servekit/weights/matrix.hpp"

namespace servekit::weights {

template <>
struct Matrix<F16> {
  std::vector<half_t> data;  // (K, N)
  int rows = 0;              // K: input features
  int cols = 0;              // N: output features

  static Matrix from_f32(std::vector<float> w, int K, int N, std::string_view name = "") {
    if (w.size() != static_cast<std::size_t>(K) * N)
      fail("weights ", name, ": ", w.size(), " values for a (", K, ", ", N, ") matrix");
    Matrix m;
    m.rows = K, m.cols = N;
    m.data.resize(w.size());
    for (std::size_t i = 0; i < w.size(); i++) m.data[i] = float_to_half(w[i]);
    return m;
  }
  std::size_t bytes() const { return data.size() * sizeof(half_t); }
  std::size_t state_bytes() const { return 0; }
  float dequant(int k, int n) const {
    return half_to_float(data[static_cast<std::size_t>(k) * cols + n]);
  }
};

}  // namespace servekit::weights
