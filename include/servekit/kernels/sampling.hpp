// SPDX-License-Identifier: Apache-2.0
#pragma once
// Greedy sampling on the device: the argmax of each row of logits, so a decode step copies back
// M token ids instead of M x V floats. Ties go to the lowest index, as std::max_element (and so
// serve::argmax) does; NaNs are never chosen.
#include "servekit/kernels/common.hpp"

namespace servekit::kernels {

struct ArgmaxParams {
  int32_t* ids;         // (M)
  const float* logits;  // (M, V)
  int M, V;
};

namespace argmax_cfg {
constexpr int kThreads = 256, kWarps = kThreads / 32;
}

// (value, index) a beats b: larger value, or equal value and lower index.
__device__ SERVEKIT_SIMT_INLINE bool beats(float va, int ia, float vb, int ib) {
  return va > vb || (va == vb && ia < ib);
}

template <int kUnused = 0>
__global__ void __launch_bounds__(argmax_cfg::kThreads) argmax_kernel(const ArgmaxParams p) {
  using namespace argmax_cfg;
  __shared__ float sv[kWarps];
  __shared__ int si[kWarps];
  const int m = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float* row = p.logits + static_cast<int64_t>(m) * p.V;
  float best = -INFINITY;
  int idx = p.V;  // "none yet": loses every tie against a real index
  for (int v = threadIdx.x; v < p.V; v += kThreads)
    if (beats(row[v], v, best, idx)) best = row[v], idx = v;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(simt::kFullMask, best, o);
    const int oi = __shfl_xor_sync(simt::kFullMask, idx, o);
    if (beats(ov, oi, best, idx)) best = ov, idx = oi;
  }
  if (lane == 0) sv[warp] = best, si[warp] = idx;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w)
      if (beats(sv[w], si[w], best, idx)) best = sv[w], idx = si[w];
    // A row of NaNs / -inf only: fall back to index 0, as max_element would.
    p.ids[m] = idx < p.V ? idx : 0;
  }
}

inline void argmax(const ArgmaxParams& p, simt::stream_handle stream = nullptr) {
  if (p.M < 1 || p.V < 1) fail("kernels::argmax: cannot run M = ", p.M, ", V = ", p.V);
  simt::launch(simt::kernel<argmax_kernel<>>, dim3(p.M), dim3(argmax_cfg::kThreads), 0, stream, p);
}

}  // namespace servekit::kernels
