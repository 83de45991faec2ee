// SPDX-License-Identifier: Apache-2.0
#pragma once
// LayerNorm over the last dimension with biased variance, as torch.nn.LayerNorm.
#include <cmath>
#include <cstdint>

#include "servekit/core/thread_pool.hpp"

namespace servekit::kernels::ref {

inline void layernorm(float* out,       // (N, C)
                      const float* in,  // (N, C)
                      const float* w,   // (C)
                      const float* b,   // (C)
                      int N, int C, float eps) {
  parallel_for(N, [&](int n) {
    const float* x = in + static_cast<int64_t>(n) * C;
    float* o = out + static_cast<int64_t>(n) * C;
    // Two passes (mean, then centred variance): the one-pass E[x^2]-E[x]^2 form loses digits
    // when the residual stream grows large.
    float mean = 0.f;
    for (int c = 0; c < C; c++) mean += x[c];
    mean /= C;
    float var = 0.f;
    for (int c = 0; c < C; c++) var += (x[c] - mean) * (x[c] - mean);
    var /= C;
    const float rstd = 1.f / std::sqrt(var + eps);
    for (int c = 0; c < C; c++) o[c] = (x[c] - mean) * rstd * w[c] + b[c];
  });
}

}  // namespace servekit::kernels::ref
