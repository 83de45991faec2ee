// SPDX-License-Identifier: Apache-2.0
#pragma once
// out = epilogue(x @ W + bias) for fp32 W stored (K, N). Blocked so that a block of output
// columns of a few rows stays in L1 while W streams through once per row block: decode
// (M = 1) is bandwidth-bound on W, prefill reuses each W row for MB rows of x.
#include <algorithm>
#include <cstdint>

#include "servekit/kernels/ref/gelu.hpp"

namespace servekit::kernels::ref {

enum class Epilogue {
  Store,     // out = x @ W + b
  Gelu,      // out = gelu_tanh(x @ W + b)
  Residual,  // out += x @ W + b   (the residual stream update)
};

template <Epilogue E>
void matmul(float* out,      // (M, N)
            const float* x,  // (M, K)
            const float* W,  // (K, N)
            const float* b,  // (N) or nullptr
            int M, int K, int N) {
  constexpr int NB = 128;  // output columns per block
  constexpr int MB = 4;    // rows of x per block
  const int n_blocks = (N + NB - 1) / NB;
  const int m_blocks = (M + MB - 1) / MB;
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
  for (int mb = 0; mb < m_blocks; mb++) {
    for (int nb = 0; nb < n_blocks; nb++) {
      const int m0 = mb * MB, rows = std::min(MB, M - m0);
      const int n0 = nb * NB, cols = std::min(NB, N - n0);
      float acc[MB][NB];
      for (int r = 0; r < MB; r++)
        for (int c = 0; c < NB; c++) acc[r][c] = 0.f;
      for (int k = 0; k < K; k++) {
        const float* w = W + static_cast<int64_t>(k) * N + n0;
        for (int r = 0; r < rows; r++) {
          const float xv = x[static_cast<int64_t>(m0 + r) * K + k];
          for (int c = 0; c < cols; c++) acc[r][c] += xv * w[c];
        }
      }
      for (int r = 0; r < rows; r++) {
        float* o = out + static_cast<int64_t>(m0 + r) * N + n0;
        for (int c = 0; c < cols; c++) {
          const float v = acc[r][c] + (b ? b[n0 + c] : 0.f);
          if constexpr (E == Epilogue::Store) o[c] = v;
          if constexpr (E == Epilogue::Gelu) o[c] = gelu_tanh(v);
          if constexpr (E == Epilogue::Residual) o[c] += v;
        }
      }
    }
  }
}

}  // namespace servekit::kernels::ref
