// SPDX-License-Identifier: Apache-2.0
#pragma once
// W8A8 weights: symmetric int8 codes per group with a float scale each (see W8A8 in policy.hpp
// for the formula; core/symmetric_int8.hpp for the rounding). What a kernel derives from them
// for its instructions (the host's column sums, kernels/host/packed.hpp) lives in its own form.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/core/symmetric_int8.hpp"
#include "servekit/weights/matrix.hpp"
#include "servekit/weights/traits.hpp"

namespace servekit::weights {

template <Granularity G>
struct Matrix<W8A8<G>> {
  std::vector<int8_t> q;     // (K, N)
  std::vector<float> scale;  // (K / group_rows, state_cols)
  int rows = 0;              // K: input features
  int cols = 0;              // N: output features
  int group_rows = 0;        // input rows sharing one scale, a multiple of 4
  int state_cols = 0;        // N when groups are per column, else 1

  static Matrix from_f32(std::vector<float> w, int K, int N, std::string_view name = "") {
    const std::string_view who = name.empty() ? std::string_view("(unnamed)") : name;
    if (w.size() != static_cast<std::size_t>(K) * N)
      fail("weights ", who, ": ", w.size(), " values for a (", K, ", ", N, ") matrix");
    Matrix m;
    m.rows = K, m.cols = N;
    m.group_rows = G::rows(K);
    m.state_cols = G::per_column ? N : 1;
    if (m.group_rows <= 0 || K % m.group_rows != 0 || m.group_rows % 4 != 0)
      fail("weights ", who, ": ", W8A8<G>::name, " needs its group of ", m.group_rows,
           " input rows to divide K = ", K, " and to be a multiple of 4 (this matrix is (K, N) = (",
           K, ", ", N, "))");
    for (std::size_t i = 0; i < w.size(); i++)
      if (!std::isfinite(w[i]))
        fail("weights ", who, ": non-finite value ", w[i], " at (", i / N, ", ", i % N, ")");
    const int n_groups = K / m.group_rows, S = m.state_cols, GK = m.group_rows;
    m.q.resize(w.size());
    m.scale.resize(static_cast<std::size_t>(n_groups) * S);
    for (int g = 0; g < n_groups; g++) {
      const std::size_t at = static_cast<std::size_t>(g) * GK * N;
      if (G::per_column) {
        for (int n = 0; n < N; n++)
          m.scale[static_cast<std::size_t>(g) * S + n] =
              quantize_s8(m.q.data() + at + n, w.data() + at + n, GK, N);
      } else {
        m.scale[g] = quantize_s8(m.q.data() + at, w.data() + at, GK * N);
      }
    }
    return m;
  }

  std::size_t bytes() const { return q.size() + state_bytes(); }
  std::size_t state_bytes() const { return scale.size() * sizeof(float); }
  std::size_t state_index(int k, int n) const {
    return static_cast<std::size_t>(k / group_rows) * state_cols + (G::per_column ? n : 0);
  }
  float dequant(int k, int n) const {
    return static_cast<float>(q[static_cast<std::size_t>(k) * cols + n]) * scale[state_index(k, n)];
  }
};

template <Granularity G>
struct Traits<W8A8<G>> {
  using Element = int8_t;
  static constexpr LinearFamily family = LinearFamily::Int8;
  static auto& codes(Matrix<W8A8<G>>& m) { return m.q; }
  static const auto& codes(const Matrix<W8A8<G>>& m) { return m.q; }
};

}  // namespace servekit::weights
