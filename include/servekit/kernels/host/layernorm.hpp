// SPDX-License-Identifier: Apache-2.0
#pragma once
// Layer norm on the host: kernels/ref's two passes (the mean, then the centred variance), each
// sum taken in kLanes chains and added as a tree (lane_sum) instead of one chain of C dependent
// adds. The ref loop's two chains of 768 adds were 2% of an AVX2 W8A8 prefill and 5% of an
// AVX-512 one. A row's sums depend on C alone, so its output does not depend on the batch.
#include <cmath>
#include <cstdint>

#include "servekit/core/thread_pool.hpp"
#include "servekit/kernels/host/simd.hpp"

namespace servekit::kernels::host {

// One row, outside the pool's lambda: written inside it, this code stopped nvcc 13's device pass
// ("unsupported aggregate constant") in .cu units that include the host backend.
inline void layernorm_row(float* o, const float* x, const float* w, const float* b, int C,
                          float eps) {
  const int body = C / kLanes * kLanes;
  vec s{};
  for (int c = 0; c < body; c += kLanes) s += load(x + c);
  float sum = lane_sum(s);
  for (int c = body; c < C; c++) sum += x[c];
  const float mean = sum / static_cast<float>(C);
  const vec m = vec{} + mean;
  vec q{};
  for (int c = 0; c < body; c += kLanes) {
    const vec d = load(x + c) - m;
    q = madd(d, d, q);
  }
  float var = lane_sum(q);
  for (int c = body; c < C; c++) var = madd(x[c] - mean, x[c] - mean, var);
  var /= static_cast<float>(C);
  const float rstd = 1.f / std::sqrt(var + eps);
  const vec r = vec{} + rstd;
  for (int c = 0; c < body; c += kLanes)
    store(o + c, madd((load(x + c) - m) * r, load(w + c), load(b + c)));
  for (int c = body; c < C; c++) o[c] = madd((x[c] - mean) * rstd, w[c], b[c]);
}

inline void layernorm(float* out,       // (N, C)
                      const float* in,  // (N, C)
                      const float* w,   // (C)
                      const float* b,   // (C)
                      int N, int C, float eps) {
  parallel_for(N, [&](int n) {
    layernorm_row(out + static_cast<int64_t>(n) * C, in + static_cast<int64_t>(n) * C, w, b, C,
                  eps);
  });
}

}  // namespace servekit::kernels::host
