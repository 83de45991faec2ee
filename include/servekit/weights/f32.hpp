// SPDX-License-Identifier: Apache-2.0
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "servekit/weights/matrix.hpp"

namespace servekit::weights {

template <>
struct Matrix<F32> {
  std::vector<float> data;  // (K, N)
  int rows = 0;             // K: input features
  int cols = 0;             // N: output features

  static Matrix from_f32(std::vector<float> w, int K, int N) { return {std::move(w), K, N}; }
  std::size_t bytes() const { return data.size() * sizeof(float); }
};

}  // namespace servekit::weights
