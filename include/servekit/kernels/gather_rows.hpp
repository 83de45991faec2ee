// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// Row gather: out[i] = in[rows[i]]. The decoder takes each sequence's last row of the residual
// stream this way before ln_f and lm_head, so only the rows whose logits are wanted go on.
// One block per output row, threads along C.
#include "servekit/kernels/common.hpp"

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

struct GatherRowsParams {
  float* out;           // (M, C)
  const float* in;      // (N, C)
  const int32_t* rows;  // (M) row of in for each row of out
  int M, C;
};

template <int kThreads>
__global__ void __launch_bounds__(kThreads) gather_rows_kernel(const GatherRowsParams p) {
  const int m = blockIdx.x;
  const float* src = p.in + static_cast<int64_t>(p.rows[m]) * p.C;
  float* dst = p.out + static_cast<int64_t>(m) * p.C;
  for (int c = threadIdx.x; c < p.C; c += kThreads) dst[c] = src[c];
}

// The row ids are built by the model from a validated batch; out and in must not overlap.
inline void gather_rows(const GatherRowsParams& p, simt::stream_handle stream = nullptr) {
  if (p.M < 1 || p.C < 1) fail("kernels::gather_rows: cannot run M = ", p.M, ", C = ", p.C);
  constexpr int kThreads = 128;
  simt::expect_bytes(static_cast<std::size_t>(p.M) * (sizeof(int32_t) + 2 * p.C * sizeof(float)));
  simt::launch(simt::kernel<gather_rows_kernel<kThreads>>, dim3(p.M), dim3(kThreads), 0, stream, p);
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
