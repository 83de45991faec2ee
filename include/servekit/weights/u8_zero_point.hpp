// SPDX-License-Identifier: Apache-2.0
#pragma once
// Zero-point uint8 weights (the course's lesson 4): each group of weights maps its [min, max]
// onto 0..255. One byte per weight plus (scale, min) per group; see U8ZeroPoint in policy.hpp
// for the formula and the granularities.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/weights/matrix.hpp"
#include "servekit/weights/traits.hpp"

namespace servekit::weights {

// The course's quantize/dequantize for one value, in fp32 exactly as torch evaluates them:
// (w - min) / scale, clamped to [0, 255], then cast (truncation toward zero, not rounding).
// max == min gives scale 0; torch would compute 0/0 there, we map every weight to q = 0 so
// that w' = min = w exactly.
inline float u8zp_scale(float min, float max) {
  return (max - min) / 255.f;
}

inline uint8_t u8zp_quantize(float w, float scale, float min) {
  if (scale == 0.f) return 0;
  const float t = std::clamp((w - min) / scale, 0.f, 255.f);
  return static_cast<uint8_t>(t);
}

inline float u8zp_dequantize(uint8_t q, float scale, float min) {
  return static_cast<float>(q) * scale + min;
}

template <Granularity G>
struct Matrix<U8ZeroPoint<G>> {
  std::vector<uint8_t> q;    // (K, N)
  std::vector<float> scale;  // (K / rows_per_group, n_state_cols)
  std::vector<float> zero;   // (K / rows_per_group, n_state_cols): each group's min
  int rows = 0;              // K: input features
  int cols = 0;              // N: output features
  int group_rows = 0;        // input rows sharing one (scale, min)
  int state_cols = 0;        // N when groups are per column, else 1

  static Matrix from_f32(std::vector<float> w, int K, int N, std::string_view name = "") {
    if (w.size() != static_cast<std::size_t>(K) * N)
      fail("weights ", name, ": ", w.size(), " values for a (", K, ", ", N, ") matrix");
    Matrix m;
    m.rows = K, m.cols = N;
    m.group_rows = G::rows(K);
    m.state_cols = G::per_column ? N : 1;
    if (m.group_rows <= 0 || K % m.group_rows != 0)
      fail("weights ", name.empty() ? std::string_view("(unnamed)") : name, ": ", G::name,
           " needs the group size G = ", m.group_rows, " to divide K = ", K,
           " (the input rows of this (K, N) = (", K, ", ", N, ") matrix)");
    const int n_groups = K / m.group_rows, S = m.state_cols;
    m.scale.resize(static_cast<std::size_t>(n_groups) * S);
    m.zero.resize(m.scale.size());
    m.q.resize(w.size());

    constexpr float inf = std::numeric_limits<float>::infinity();
    std::vector<float> lo(S), hi(S);
    for (int g = 0; g < n_groups; g++) {
      const int k0 = g * m.group_rows, k1 = k0 + m.group_rows;
      std::fill(lo.begin(), lo.end(), inf);
      std::fill(hi.begin(), hi.end(), -inf);
      for (int k = k0; k < k1; k++) {
        const float* row = w.data() + static_cast<std::size_t>(k) * N;
        for (int n = 0; n < N; n++) {
          if (!std::isfinite(row[n]))
            fail("weights ", name, ": non-finite value ", row[n], " at (", k, ", ", n, ")");
          const int s = G::per_column ? n : 0;
          lo[s] = std::min(lo[s], row[n]);
          hi[s] = std::max(hi[s], row[n]);
        }
      }
      float* sc = m.scale.data() + static_cast<std::size_t>(g) * S;
      float* zp = m.zero.data() + static_cast<std::size_t>(g) * S;
      for (int s = 0; s < S; s++) sc[s] = u8zp_scale(lo[s], hi[s]), zp[s] = lo[s];
      for (int k = k0; k < k1; k++) {
        const float* row = w.data() + static_cast<std::size_t>(k) * N;
        uint8_t* qr = m.q.data() + static_cast<std::size_t>(k) * N;
        for (int n = 0; n < N; n++) {
          const int s = G::per_column ? n : 0;
          qr[n] = u8zp_quantize(row[n], sc[s], zp[s]);
        }
      }
    }
    return m;
  }

  // Storage plus the quantization state (scale and min per group).
  std::size_t bytes() const { return q.size() + state_bytes(); }
  std::size_t state_bytes() const { return (scale.size() + zero.size()) * sizeof(float); }

  std::size_t state_index(int k, int n) const {
    return static_cast<std::size_t>(k / group_rows) * state_cols + (G::per_column ? n : 0);
  }
  float dequant(int k, int n) const {
    const std::size_t s = state_index(k, n);
    return u8zp_dequantize(q[static_cast<std::size_t>(k) * cols + n], scale[s], zero[s]);
  }
};

template <Granularity G>
struct Traits<U8ZeroPoint<G>> {
  using Element = uint8_t;
  static constexpr LinearFamily family = LinearFamily::ZeroPoint8;
  static auto& codes(Matrix<U8ZeroPoint<G>>& m) { return m.q; }
  static const auto& codes(const Matrix<U8ZeroPoint<G>>& m) { return m.q; }
};

}  // namespace servekit::weights
