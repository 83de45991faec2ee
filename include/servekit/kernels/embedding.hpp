// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// Token + position embedding: a gather, one block per row, threads along C so that each
// warp reads 128 contiguous bytes of wte and wpe.
#include "servekit/kernels/common.hpp"

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

struct EmbeddingParams {
  float* out;             // (N, C)
  const int32_t* tokens;  // (N)
  const int32_t* pos;     // (N)
  const float* wte;       // (V, C)
  const float* wpe;       // (P, C)
  int N, C;
};

template <int kThreads>
__global__ void __launch_bounds__(kThreads) embedding_kernel(const EmbeddingParams p) {
  const int n = blockIdx.x;
  const float* te = p.wte + static_cast<int64_t>(p.tokens[n]) * p.C;
  const float* pe = p.wpe + static_cast<int64_t>(p.pos[n]) * p.C;
  float* o = p.out + static_cast<int64_t>(n) * p.C;
  for (int c = threadIdx.x; c < p.C; c += kThreads) o[c] = te[c] + pe[c];
}

// Ids and positions are validated by the model before any kernel runs.
inline void embedding(const EmbeddingParams& p, simt::stream_handle stream = nullptr) {
  if (p.N < 1 || p.C < 1) fail("kernels::embedding: cannot run N = ", p.N, ", C = ", p.C);
  constexpr int kThreads = 128;
  // Per row: its token and position, their wte and wpe rows; the (C) sum written.
  simt::expect_bytes(static_cast<std::size_t>(p.N) *
                     (2 * sizeof(int32_t) + 3 * p.C * sizeof(float)));
  simt::launch(simt::kernel<embedding_kernel<kThreads>>, dim3(p.N), dim3(kThreads), 0, stream, p);
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
