// SPDX-License-Identifier: Apache-2.0
#pragma once
#include <cstddef>
#include <string_view>
#include <utility>
#include <vector>

#include "servekit/weights/matrix.hpp"
#include "servekit/weights/traits.hpp"

namespace servekit::weights {

template <>
struct Matrix<F32> {
  std::vector<float> data;  // (K, N)
  int rows = 0;             // K: input features
  int cols = 0;             // N: output features

  static Matrix from_f32(std::vector<float> w, int K, int N, std::string_view = "") {
    return {std::move(w), K, N};
  }
  std::size_t bytes() const { return data.size() * sizeof(float); }
  std::size_t state_bytes() const { return 0; }
  float dequant(int k, int n) const { return data[static_cast<std::size_t>(k) * cols + n]; }
};

template <>
struct Traits<F32> {
  using Element = float;
  static constexpr LinearFamily family = LinearFamily::Dense32;
  static auto& codes(Matrix<F32>& m) { return m.data; }
  static const auto& codes(const Matrix<F32>& m) { return m.data; }
};

}  // namespace servekit::weights
