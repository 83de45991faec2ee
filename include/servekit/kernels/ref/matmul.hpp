// SPDX-License-Identifier: Apache-2.0
#pragma once
// out = epilogue(x @ W + bias) for fp32 W stored (K, N). Blocked so that a block of output
// columns of a few rows stays in L1 while W streams through once per row block: decode
// (M = 1) is bandwidth-bound on W, prefill reuses each W row for MB rows of x.
#include <algorithm>
#include <cstdint>
#include <vector>

#include <omp.h>

#include "servekit/kernels/ref/gelu.hpp"

namespace servekit::kernels::ref {

enum class Epilogue {
  Store,     // out = x @ W + b
  Gelu,      // out = gelu_tanh(x @ W + b)
  Residual,  // out += x @ W + b   (the residual stream update)
};

template <Epilogue E>
inline void store_row(float* o, const float* acc, const float* b, int cols) {
  for (int c = 0; c < cols; c++) {
    const float v = acc[c] + (b ? b[c] : 0.f);
    if constexpr (E == Epilogue::Store) o[c] = v;
    if constexpr (E == Epilogue::Gelu) o[c] = gelu_tanh(v);
    if constexpr (E == Epilogue::Residual) o[c] += v;
  }
}

// Prefill micro-kernel: an MR x NR tile of out held in registers while K streams through, so
// each W element loaded feeds MR FMAs and each x element NR.
template <Epilogue E, int MR, int NR>
inline void matmul_tile(float* out, const float* x, const float* W, const float* b, int K, int N,
                        int rows, int cols) {
  float acc[MR][NR] = {};
  for (int k = 0; k < K; k++) {
    const float* w = W + static_cast<int64_t>(k) * N;
    float wv[NR];
    for (int c = 0; c < NR; c++) wv[c] = c < cols ? w[c] : 0.f;
    for (int r = 0; r < MR; r++) {
      const float xv = r < rows ? x[static_cast<int64_t>(r) * K + k] : 0.f;
      for (int c = 0; c < NR; c++) acc[r][c] += xv * wv[c];
    }
  }
  for (int r = 0; r < rows; r++) store_row<E>(out + static_cast<int64_t>(r) * N, acc[r], b, cols);
}

template <Epilogue E>
void matmul(float* out,       // (M, N)
            const float* x,   // (M, K)
            const float* W,   // (K, N)
            const float* b,   // (N) or nullptr
            int M, int K, int N) {
  if (M >= 8) {
    // Prefill: register-blocked tiles (8 x 32 measured best of 4..16 x 32..64 on AVX-512).
    constexpr int MR = 8, NR = 32;
    const int n_blocks = (N + NR - 1) / NR, m_blocks = (M + MR - 1) / MR;
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int nb = 0; nb < n_blocks; nb++)
      for (int mb = 0; mb < m_blocks; mb++) {
        const int m0 = mb * MR, n0 = nb * NR;
        matmul_tile<E, MR, NR>(out + static_cast<int64_t>(m0) * N + n0, x + static_cast<int64_t>(m0) * K,
                               W + n0, b ? b + n0 : nullptr, K, N, std::min(MR, M - m0),
                               std::min(NR, N - n0));
      }
    return;
  }
  // Decode (a few rows): bandwidth-bound on W. Each thread streams a contiguous band of W's
  // rows (one sequential read, the prefetcher's best case) into private partial sums of all N
  // columns; the partials are then added and the epilogue applied, in parallel over columns.
  const int T = omp_get_max_threads();
  const int n_bands = std::max(1, std::min(T, K / 64));
  std::vector<float> part(static_cast<std::size_t>(n_bands) * M * N);  // (bands, M, N)
#pragma omp parallel for schedule(static) num_threads(n_bands)
  for (int band = 0; band < n_bands; band++) {
    const int k0 = static_cast<int>(static_cast<int64_t>(K) * band / n_bands);
    const int k1 = static_cast<int>(static_cast<int64_t>(K) * (band + 1) / n_bands);
    float* acc = part.data() + static_cast<std::size_t>(band) * M * N;
    for (int i = 0; i < M * N; i++) acc[i] = 0.f;
    for (int k = k0; k < k1; k++) {
      const float* w = W + static_cast<int64_t>(k) * N;
      for (int r = 0; r < M; r++) {
        const float xv = x[static_cast<int64_t>(r) * K + k];
        float* a = acc + static_cast<int64_t>(r) * N;
#pragma omp simd
        for (int c = 0; c < N; c++) a[c] += xv * w[c];
      }
    }
  }
  constexpr int NB = 256;
#pragma omp parallel for schedule(static)
  for (int n0 = 0; n0 < N; n0 += NB) {
    const int cols = std::min(NB, N - n0);
    float sum[NB];
    for (int r = 0; r < M; r++) {
      for (int c = 0; c < cols; c++) sum[c] = 0.f;
      for (int band = 0; band < n_bands; band++) {
        const float* a = part.data() + (static_cast<std::size_t>(band) * M + r) * N + n0;
        for (int c = 0; c < cols; c++) sum[c] += a[c];
      }
      store_row<E>(out + static_cast<int64_t>(r) * N + n0, sum, b ? b + n0 : nullptr, cols);
    }
  }
}

}  // namespace servekit::kernels::ref
