// SPDX-License-Identifier: Apache-2.0
#pragma once
// Linear layers dispatched on the weight format: one overload per weights::Matrix
// specialisation, each fusing its dequantisation into the matmul. They share matmul's
// blocking: a block of MB rows of x times NB output columns stays in L1 while W streams
// through once, and only the current (1, NB) slice of a W row is ever widened to fp32, so no
// dequantised copy of the matrix exists and decode reads the compact storage only.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "servekit/kernels/ref/matmul.hpp"
#include "servekit/weights/formats.hpp"

namespace servekit::kernels::ref {

namespace detail {
constexpr int kLinearNB = 128;  // output columns per block (as in matmul)
constexpr int kLinearMB = 4;    // rows of x per block

// half -> float without branches, so that widening a row block vectorises (core's
// half_to_float loops over denormals). Exact for every half; tests compare all 65536.
inline float widen_half(half_t h) {
  const uint32_t sign = uint32_t(h.bits & 0x8000u) << 16;
  const uint32_t em = uint32_t(h.bits & 0x7fffu) << 13;  // exponent and mantissa, fp32 place
  const uint32_t exp = em & 0x0f800000u;
  const uint32_t normal = em + (112u << 23);  // rebias 15 -> 127
  const uint32_t infnan = em + (224u << 23);  // exponent 31 -> 255
  // Denormal or zero: 2^-14 (1 + m / 1024) - 2^-14 = m 2^-24, exactly.
  const float den = std::bit_cast<float>(em + (113u << 23)) - std::bit_cast<float>(113u << 23);
  uint32_t r = exp == 0x0f800000u ? infnan : normal;
  r = exp == 0 ? std::bit_cast<uint32_t>(den) : r;
  return std::bit_cast<float>(r | sign);
}

// out = epilogue(x @ W + b) where widen(k, n0, cols, w) writes W[k, n0 .. n0+cols) as fp32.
template <Epilogue E, class Widen>
void blocked_linear(float* out, const float* x, const float* b, const float* add, int M, int K,
                    int N, const Widen& widen) {
  if (M < 8) {  // decode: each thread streams its band of columns of every W row, widened
    banded_rows<E>(out, b, add, M, N, [&](int n0, int n1, float* acc) {
      float* w = thread_scratch<2>(N);  // the band of one widened row of W
      for (int k = 0; k < K; k++) {
        widen(k, n0, n1 - n0, w);
        for (int r = 0; r < M; r++) {
          const float xv = x[static_cast<int64_t>(r) * K + k];
          float* a = acc + static_cast<int64_t>(r) * N + n0;
#pragma omp simd
          for (int c = 0; c < n1 - n0; c++) a[c] += xv * w[c];
        }
      }
    });
    return;
  }
  constexpr int NB = kLinearNB, MB = kLinearMB;
  parallel_blocks<MB, NB>(M, N, [&](int m0, int rows, int n0, int cols) {
    float acc[MB][NB] = {};
    float w[NB];  // W[k, n0 .. n0+cols) in fp32
    for (int k = 0; k < K; k++) {
      widen(k, n0, cols, w);
      for (int r = 0; r < rows; r++) {
        const float xv = x[static_cast<int64_t>(m0 + r) * K + k];
        for (int c = 0; c < cols; c++) acc[r][c] += xv * w[c];
      }
    }
    for (int r = 0; r < rows; r++)
      store_row<E>(out + static_cast<int64_t>(m0 + r) * N + n0, acc[r], b ? b + n0 : nullptr,
                   add ? add + static_cast<int64_t>(m0 + r) * N + n0 : nullptr, cols);
  });
}
}  // namespace detail

template <Epilogue E>
void linear(float* out,                              // (M, N)
            const float* x,                          // (M, K)
            const weights::Matrix<weights::F32>& W,  // (K, N)
            const float* b,                          // (N)
            int M,
            const float* add = nullptr) {  // (M, N) added before the epilogue
  matmul<E>(out, x, W.data.data(), b, M, W.rows, W.cols, add);
}

// fp16 and bf16: widen each streamed slice of a W row to fp32 (fp16 without branches, so the
// loop vectorises; bf16 is a shift).
inline float widen(half_t h) {
  return detail::widen_half(h);
}
inline float widen(bf16_t h) {
  return bf16_to_float(h);
}

template <Epilogue E, class Fmt>
requires std::is_same_v<Fmt, weights::F16> || std::is_same_v<Fmt, weights::BF16>
void linear(float* out,                     // (M, N)
            const float* x,                 // (M, K)
            const weights::Matrix<Fmt>& W,  // (K, N)
            const float* b,                 // (N)
            int M,
            const float* add = nullptr) {  // (M, N) added before the epilogue
  const auto* d = W.data.data();
  const int N = W.cols;
  detail::blocked_linear<E>(out, x, b, add, M, W.rows, N, [=](int k, int n0, int cols, float* w) {
    const auto* row = d + static_cast<int64_t>(k) * N + n0;
    for (int c = 0; c < cols; c++) w[c] = widen(row[c]);
  });
}

// Zero-point uint8. Inside a group every weight is q * scale + min with one (scale, min) per
// column (or per tensor), so the sum over the group factors:
//   sum_k x_k (q_kn scale_n + min_n) = scale_n * sum_k x_k q_kn + min_n * sum_k x_k
// The k-loop multiplies by the raw q (a byte widened to fp32) and the two floats are applied
// once per group and column: per tensor and per channel that is once after the whole k-loop.
template <Epilogue E, weights::Granularity G>
void linear(float* out,                                         // (M, N)
            const float* x,                                     // (M, K)
            const weights::Matrix<weights::U8ZeroPoint<G>>& W,  // (K, N)
            const float* b,                                     // (N)
            int M,
            const float* add = nullptr) {  // (M, N) added before the epilogue
  constexpr int NB = detail::kLinearNB, MB = detail::kLinearMB;
  const int K = W.rows, N = W.cols, GK = W.group_rows, S = W.state_cols;
  const uint8_t* q = W.q.data();
  if (M < 8) {
    // Decode: each thread owns a band of columns and walks the groups in order, as the
    // prefill blocks below do (the same sums in the same order: batch invariance).
    banded_rows<E>(out, b, add, M, N, [&](int n0, int n1, float* acc) {
      const int cols = n1 - n0;
      float* part = thread_scratch<2>(static_cast<std::size_t>(M) * cols);  // (M, cols) sum x q
      float xsum[8];
      for (int k0 = 0; k0 < K; k0 += GK) {
        std::fill(part, part + static_cast<std::size_t>(M) * cols, 0.f);
        for (int r = 0; r < M; r++) xsum[r] = 0.f;
        for (int k = k0; k < k0 + GK; k++) {
          const uint8_t* qr = q + static_cast<int64_t>(k) * N + n0;
          for (int r = 0; r < M; r++) {
            const float xv = x[static_cast<int64_t>(r) * K + k];
            xsum[r] += xv;
            float* p = part + static_cast<int64_t>(r) * cols;
#pragma omp simd
            for (int c = 0; c < cols; c++) p[c] += xv * static_cast<float>(qr[c]);
          }
        }
        const int64_t s0 = static_cast<int64_t>(k0 / GK) * S;
        const float* sc = W.scale.data() + s0 + (G::per_column ? n0 : 0);
        const float* zp = W.zero.data() + s0 + (G::per_column ? n0 : 0);
        for (int r = 0; r < M; r++) {
          float* a = acc + static_cast<int64_t>(r) * N + n0;
          const float* p = part + static_cast<int64_t>(r) * cols;
          for (int c = 0; c < cols; c++) {
            const int s = G::per_column ? c : 0;
            a[c] += sc[s] * p[c] + zp[s] * xsum[r];
          }
        }
      }
    });
    return;
  }
  parallel_blocks<MB, NB>(M, N, [&](int m0, int rows, int n0, int cols) {
    float acc[MB][NB] = {};  // the dequantised result so far
    float part[MB][NB];      // sum_k x_k q_kn over the current group
    float xsum[MB];          // sum_k x_k over the current group
    for (int k0 = 0; k0 < K; k0 += GK) {
      for (int r = 0; r < rows; r++) {
        xsum[r] = 0.f;
        for (int c = 0; c < cols; c++) part[r][c] = 0.f;
      }
      for (int k = k0; k < k0 + GK; k++) {
        const uint8_t* qr = q + static_cast<int64_t>(k) * N + n0;
        for (int r = 0; r < rows; r++) {
          const float xv = x[static_cast<int64_t>(m0 + r) * K + k];
          xsum[r] += xv;
          for (int c = 0; c < cols; c++) part[r][c] += xv * static_cast<float>(qr[c]);
        }
      }
      const int64_t s0 = static_cast<int64_t>(k0 / GK) * S;
      const float* sc = W.scale.data() + s0 + (G::per_column ? n0 : 0);
      const float* zp = W.zero.data() + s0 + (G::per_column ? n0 : 0);
      for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
          const int s = G::per_column ? c : 0;
          acc[r][c] += sc[s] * part[r][c] + zp[s] * xsum[r];
        }
    }
    for (int r = 0; r < rows; r++)
      store_row<E>(out + static_cast<int64_t>(m0 + r) * N + n0, acc[r], b ? b + n0 : nullptr,
                   add ? add + static_cast<int64_t>(m0 + r) * N + n0 : nullptr, cols);
  });
}

}  // namespace servekit::kernels::ref
