// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// Constrained decoding's step on the device: the tokens a row's grammar refuses get -inf
// before sampling (constrain/token_mask.hpp computes the masks on the host). One block per
// mask slot, so rows without a constraint are not touched and a step without any launches
// nothing. A slot whose row is -1 masks nothing: a decode step replayed from a graph launches
// one block per sequence, whichever of them are masked this step (model/gpt2.hpp).
#include <cmath>
#include <cstdint>

#include "servekit/kernels/common.hpp"

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

struct MaskParams {
  float* logits;          // (M, V)
  const uint32_t* words;  // (n, ceil(V / 32)) bit v of mask k: token v allowed
  const int32_t* rows;    // (n) the logits row mask k applies to, or -1: none
  int n, M, V;
};

namespace mask_cfg {
constexpr int kThreads = 256;
}

template <int kUnused = 0>
__global__ void __launch_bounds__(mask_cfg::kThreads) mask_logits_kernel(const MaskParams p) {
  const int k = blockIdx.x, W = (p.V + 31) / 32;
  if (p.rows[k] < 0) return;                                      // block-uniform
  float* row = p.logits + static_cast<int64_t>(p.rows[k]) * p.V;  // (V)
  const uint32_t* w = p.words + static_cast<int64_t>(k) * W;      // (W)
  for (int v = threadIdx.x; v < p.V; v += mask_cfg::kThreads)
    if (!((w[v >> 5] >> (v & 31)) & 1u)) row[v] = -INFINITY;
}

inline void mask_logits(const MaskParams& p, simt::stream_handle stream = nullptr) {
  if (p.n < 1 || p.V < 1) fail("kernels::mask_logits: cannot run n = ", p.n, ", V = ", p.V);
  simt::expect_bytes(
      static_cast<std::size_t>(p.n) *
      (sizeof(int32_t) + ceil_div(p.V, 32) * sizeof(uint32_t) + 2 * p.V * sizeof(float)));
  simt::launch(simt::kernel<mask_logits_kernel<>>, dim3(p.n), dim3(mask_cfg::kThreads), 0, stream,
               p);
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
