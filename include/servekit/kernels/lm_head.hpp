// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// logits = x @ wte^T (GPT-2 ties the output projection to the token embedding). wte rows are
// contiguous in C, so a warp takes one vocabulary row and its lanes stride along C: each wte
// row is read once per block for up to kRows rows of x, which sit in shared memory.
#include "servekit/kernels/common.hpp"

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

struct LmHeadParams {
  float* logits;     // (M, V)
  const float* x;    // (M, C)
  const float* wte;  // (V, C)
  int M, V, C;
};

namespace lm_head_cfg {
constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int kVocabPerWarp = 2;  // vocabulary rows per warp
constexpr int kRows = 8;          // rows of x per block
constexpr int kChunk = 256;       // features of x staged at a time
struct SharedStorage {
  float x[kRows][kChunk];
};
}  // namespace lm_head_cfg

// A template only so that the header can be included by several translation units.
template <int kUnused = 0>
__global__ void __launch_bounds__(lm_head_cfg::kThreads) lm_head_kernel(const LmHeadParams p) {
  using namespace lm_head_cfg;
  SERVEKIT_SHARED(SharedStorage, s);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m0 = blockIdx.y * kRows, rows = imin(kRows, p.M - m0);
  const int v0 = (blockIdx.x * kWarps + warp) * kVocabPerWarp;
  float acc[kVocabPerWarp][kRows] = {};
  for (int c0 = 0; c0 < p.C; c0 += kChunk) {
    const int len = imin(kChunk, p.C - c0);
    for (int i = threadIdx.x; i < kRows * kChunk; i += kThreads) {
      const int m = i / kChunk, c = i % kChunk;
      s.x[m][c] = m < rows && c < len ? p.x[static_cast<int64_t>(m0 + m) * p.C + c0 + c] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kVocabPerWarp; ++u) {
      const int v = v0 + u;
      if (v >= p.V) break;
      const float* w = p.wte + static_cast<int64_t>(v) * p.C + c0;
      for (int c = lane; c < len; c += 32) {
        const float wv = w[c];
#pragma unroll
        for (int m = 0; m < kRows; ++m) acc[u][m] = fmaf(s.x[m][c], wv, acc[u][m]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int u = 0; u < kVocabPerWarp; ++u) {
    const int v = v0 + u;
    if (v >= p.V) break;  // warp-uniform
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const float t = warp_sum(acc[u][m]);
      if (lane == 0 && m < rows) p.logits[static_cast<int64_t>(m0 + m) * p.V + v] = t;
    }
  }
}

inline void lm_head(const LmHeadParams& p, simt::stream_handle stream = nullptr) {
  using namespace lm_head_cfg;
  if (p.M < 1 || p.V < 1 || p.C < 1)
    fail("kernels::lm_head: cannot run M = ", p.M, ", V = ", p.V, ", C = ", p.C);
  if (ceil_div(p.M, kRows) > 65535)
    fail("kernels::lm_head: M = ", p.M, " needs more than 65535 row tiles");
  // wte read once per tile of kRows rows of x; x once per block of vocabulary rows; the
  // (M, V) logits written.
  const int vocab_blocks = ceil_div(p.V, kWarps * kVocabPerWarp);
  simt::expect_bytes(static_cast<std::size_t>(p.V) * p.C * sizeof(float) * ceil_div(p.M, kRows) +
                     static_cast<std::size_t>(p.M) * p.C * sizeof(float) * vocab_blocks +
                     static_cast<std::size_t>(p.M) * p.V * sizeof(float));
  simt::launch(simt::kernel<lm_head_kernel<>>,
               dim3(ceil_div(p.V, kWarps * kVocabPerWarp), ceil_div(p.M, kRows)), dim3(kThreads), 0,
               stream, p);
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
