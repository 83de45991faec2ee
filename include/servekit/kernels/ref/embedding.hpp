// SPDX-License-Identifier: Apache-2.0
#pragma once
// Token + position embedding. Ids and positions are validated by the caller (the model), so
// this loop stays a plain gather.
#include <cstdint>

#include "servekit/core/thread_pool.hpp"

namespace servekit::kernels::ref {

inline void embedding(float* out,             // (N, C)
                      const int32_t* tokens,  // (N)
                      const int32_t* pos,     // (N)
                      const float* wte,       // (V, C)
                      const float* wpe,       // (P, C)
                      int N, int C) {
  parallel_for(N, [&](int n) {
    const float* te = wte + static_cast<int64_t>(tokens[n]) * C;
    const float* pe = wpe + static_cast<int64_t>(pos[n]) * C;
    float* o = out + static_cast<int64_t>(n) * C;
    for (int c = 0; c < C; c++) o[c] = te[c] + pe[c];
  });
}

}  // namespace servekit::kernels::ref
