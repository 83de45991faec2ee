// SPDX-License-Identifier: Apache-2.0
#pragma once
// logits = x @ wte^T: GPT-2 ties the output projection to the token embedding, so each
// logit is a dot product with one row of wte.
#include <cstdint>

#include "servekit/core/thread_pool.hpp"

namespace servekit::kernels::ref {

inline void lm_head(float* logits,     // (M, V)
                    const float* x,    // (M, C)
                    const float* wte,  // (V, C)
                    int M, int V, int C) {
  constexpr int VB = 64;  // vocab rows per task: amortises x across rows, keeps wte streaming
  parallel_for((V + VB - 1) / VB, [&](int blk) {
    const int v0 = blk * VB, v1 = v0 + VB < V ? v0 + VB : V;
    for (int m = 0; m < M; m++) {
      const float* xr = x + static_cast<int64_t>(m) * C;
      for (int v = v0; v < v1; v++) {
        const float* w = wte + static_cast<int64_t>(v) * C;
        float acc = 0.f;
#pragma omp simd reduction(+ : acc)
        for (int c = 0; c < C; c++) acc += xr[c] * w[c];
        logits[static_cast<int64_t>(m) * V + v] = acc;
      }
    }
  });
}

}  // namespace servekit::kernels::ref
