// SPDX-License-Identifier: Apache-2.0
#pragma once
// Linear layers for every weight format: the oracle. Each weight is widened (fp16, bf16) or
// read as its raw code (zero-point uint8) where it is used; nothing is blocked or threaded.
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "servekit/core/symmetric_int8.hpp"

#include "servekit/kernels/ref/matmul.hpp"
#include "servekit/weights/formats.hpp"

namespace servekit::kernels::ref {

template <Epilogue E>
void linear(float* out,                              // (M, N)
            const float* x,                          // (M, K)
            const weights::Matrix<weights::F32>& W,  // (K, N)
            const float* b,                          // (N)
            int M,
            const float* add = nullptr) {  // (M, N) added before the epilogue
  matmul<E>(out, x, W.data.data(), b, M, W.rows, W.cols, add);
}

// A 16-bit float format (weights::LinearFamily::Dense16): each weight widened where it is used.
template <Epilogue E, class Fmt>
requires(weights::Traits<Fmt>::family == weights::LinearFamily::Dense16) void linear(
    float* out,                     // (M, N)
    const float* x,                 // (M, K)
    const weights::Matrix<Fmt>& W,  // (K, N)
    const float* b,                 // (N)
    int M,
    const float* add = nullptr) {  // (M, N) added before the epilogue
  const int K = W.rows, N = W.cols;
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      float acc = 0.f;
      for (int k = 0; k < K; k++) acc += x[static_cast<int64_t>(m) * K + k] * W.dequant(k, n);
      const int64_t i = static_cast<int64_t>(m) * N + n;
      store_out<E>(out[i], acc, b ? b[n] : 0.f, add ? add[i] : 0.f);
    }
}

// Zero-point uint8. Inside a group every weight is q * scale + min with one (scale, min) per
// column (or per tensor), so the sum over the group factors:
//   sum_k x_k (q_kn scale_n + min_n) = scale_n * sum_k x_k q_kn + min_n * sum_k x_k
// The k-loop multiplies by the raw code; the two floats are applied once per group (as every
// backend's kernels do, so that all round the same kinds of quantities).
template <Epilogue E, weights::Granularity G>
void linear(float* out,                                         // (M, N)
            const float* x,                                     // (M, K)
            const weights::Matrix<weights::U8ZeroPoint<G>>& W,  // (K, N)
            const float* b,                                     // (N)
            int M,
            const float* add = nullptr) {  // (M, N) added before the epilogue
  const int K = W.rows, N = W.cols, GK = W.group_rows;
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      float acc = 0.f;
      for (int k0 = 0; k0 < K; k0 += GK) {
        float part = 0.f, xsum = 0.f;
        for (int k = k0; k < k0 + GK; k++) {
          const float xv = x[static_cast<int64_t>(m) * K + k];
          part += xv * static_cast<float>(W.q[static_cast<int64_t>(k) * N + n]);
          xsum += xv;
        }
        const std::size_t s = W.state_index(k0, n);
        acc += W.scale[s] * part + W.zero[s] * xsum;
      }
      const int64_t i = static_cast<int64_t>(m) * N + n;
      store_out<E>(out[i], acc, b ? b[n] : 0.f, add ? add[i] : 0.f);
    }
}

// W8A8 (weights::W8A8 in policy.hpp): each row of x quantised to int8 as it is used, integer
// products summed in int32 per group, then the floats, in the order every backend uses:
//   acc = fma(s_w[g], float(isum_g), acc) over the groups, y = acc * s_x
template <Epilogue E, weights::Granularity G>
void linear(float* out,                                  // (M, N)
            const float* x,                              // (M, K)
            const weights::Matrix<weights::W8A8<G>>& W,  // (K, N)
            const float* b,                              // (N)
            int M,
            const float* add = nullptr) {  // (M, N) added before the epilogue
  const int K = W.rows, N = W.cols, GK = W.group_rows;
  std::vector<int8_t> xq(K);
  for (int m = 0; m < M; m++) {
    const float xs = quantize_s8(xq.data(), x + static_cast<int64_t>(m) * K, K);
    for (int n = 0; n < N; n++) {
      float acc = 0.f;
      for (int k0 = 0; k0 < K; k0 += GK) {
        int32_t isum = 0;
        for (int k = k0; k < k0 + GK; k++)
          isum += int32_t{xq[k]} * int32_t{W.q[static_cast<int64_t>(k) * N + n]};
        acc = std::fma(W.scale[W.state_index(k0, n)], static_cast<float>(isum), acc);
      }
      const int64_t i = static_cast<int64_t>(m) * N + n;
      store_out<E>(out[i], acc * xs, b ? b[n] : 0.f, add ? add[i] : 0.f);
    }
  }
}

}  // namespace servekit::kernels::ref
