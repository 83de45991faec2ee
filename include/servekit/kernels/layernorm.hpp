// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// LayerNorm over C, one warp per row: the row is read twice from L1/L2 (mean, then centred
// variance, as the reference: the one-pass E[x^2] - E[x]^2 form loses digits when the residual
// stream grows) and reduced with shuffles, so no shared memory and no block barrier.
#include "servekit/kernels/common.hpp"

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

struct LayernormParams {
  float* out;       // (N, C)
  const float* in;  // (N, C)
  const float* w;   // (C)
  const float* b;   // (C)
  int N, C;
  float eps;
};

// A lane's elements c = lane + 32 i, held in registers when C <= 32 kPerLane: their loads are
// issued together rather than one L2 round trip after another, which is what a decode step's
// few rows wait on. The sums run in the same order either way (lane, lane + 32, ...; a missing
// element adds +0), so the bits do not depend on which path a row takes.
constexpr int kLayernormPerLane = 64;  // C <= 2048: every GPT-2 size (1600 for XL)

template <int kWarps>
__global__ void __launch_bounds__(kWarps * 32) layernorm_kernel(const LayernormParams p) {
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * kWarps + threadIdx.x / 32;
  // The whole warp leaves together: no shuffle below runs with a partial warp.
  if (n >= p.N) return;
  const float* x = p.in + static_cast<int64_t>(n) * p.C;
  float* o = p.out + static_cast<int64_t>(n) * p.C;
  if (p.C <= 32 * kLayernormPerLane) {
    float r[kLayernormPerLane];
#pragma unroll
    for (int i = 0; i < kLayernormPerLane; i++) {
      const int c = lane + 32 * i;
      r[i] = c < p.C ? x[c] : 0.f;
    }
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kLayernormPerLane; i++) s += r[i];
    const float mean = warp_sum(s) / p.C;
    float v = 0.f;
#pragma unroll
    for (int i = 0; i < kLayernormPerLane; i++)
      if (lane + 32 * i < p.C) v += (r[i] - mean) * (r[i] - mean);
    const float rstd = rsqrtf(warp_sum(v) / p.C + p.eps);
    // Every output before the first store: a store to `o` might alias w or b, so loads of w
    // and b that follow one would each wait for the last.
#pragma unroll
    for (int i = 0; i < kLayernormPerLane; i++) {
      const int c = lane + 32 * i;
      if (c < p.C) r[i] = (r[i] - mean) * rstd * p.w[c] + p.b[c];
    }
#pragma unroll
    for (int i = 0; i < kLayernormPerLane; i++)
      if (lane + 32 * i < p.C) o[lane + 32 * i] = r[i];
    return;
  }
  float s = 0.f;
  for (int c = lane; c < p.C; c += 32) s += x[c];
  const float mean = warp_sum(s) / p.C;
  float v = 0.f;
  for (int c = lane; c < p.C; c += 32) v += (x[c] - mean) * (x[c] - mean);
  const float rstd = rsqrtf(warp_sum(v) / p.C + p.eps);
  for (int c = lane; c < p.C; c += 32) o[c] = (x[c] - mean) * rstd * p.w[c] + p.b[c];
}

inline void layernorm(const LayernormParams& p, simt::stream_handle stream = nullptr) {
  if (p.N < 1 || p.C < 1) fail("kernels::layernorm: cannot run N = ", p.N, ", C = ", p.C);
  constexpr int kWarps = 4;
  // Each row read and written; the (C) weight and bias read by every block.
  simt::expect_bytes(static_cast<std::size_t>(p.N) * 2 * p.C * sizeof(float) +
                     static_cast<std::size_t>(ceil_div(p.N, kWarps)) * 2 * p.C * sizeof(float));
  simt::launch(simt::kernel<layernorm_kernel<kWarps>>, dim3(ceil_div(p.N, kWarps)),
               dim3(kWarps * 32), 0, stream, p);
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
