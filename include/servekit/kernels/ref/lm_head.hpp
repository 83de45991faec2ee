// SPDX-License-Identifier: Apache-2.0
#pragma once
// logits = x @ wte^T: GPT-2 ties the output projection to the token embedding, so each
// logit is a dot product with one row of wte. The oracle: one plain loop per logit.
#include <cstdint>

namespace servekit::kernels::ref {

inline void lm_head(float* logits,     // (M, V)
                    const float* x,    // (M, C)
                    const float* wte,  // (V, C)
                    int M, int V, int C) {
  for (int m = 0; m < M; m++)
    for (int v = 0; v < V; v++) {
      float acc = 0.f;
      for (int c = 0; c < C; c++)
        acc += x[static_cast<int64_t>(m) * C + c] * wte[static_cast<int64_t>(v) * C + c];
      logits[static_cast<int64_t>(m) * V + v] = acc;
    }
}

}  // namespace servekit::kernels::ref
