// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// What the W8A8 kernels share (linear_i8.hpp, linear_i8_mma.hpp): the launch's arguments, the
// quantisation of x's rows, W's words turned into column quads, the scratch's size and the
// output's float chain.
#include <cstddef>
#include <cstdint>

#include "servekit/core/symmetric_int8.hpp"
#include "servekit/kernels/common.hpp"

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

struct LinearI8Params {
  float* out;            // (M, N)
  const float* x;        // (M, K)
  const std::int8_t* q;  // (K, N)
  const float* scale;    // (K / group_rows, state_cols)
  const float* b;        // (N) or nullptr
  int M, K, N;
  int group_rows;              // input rows sharing one scale: a multiple of 4 dividing K
  int state_cols;              // N when each column has its own scale, 1 per tensor
  const float* add = nullptr;  // (M, N) added before the epilogue (a LoRA delta), or nullptr
};

constexpr int kI8Threads = 64;  // dot-product threads per block: 256 columns
constexpr int kI8Rows = 8;      // rows of x per thread: a decode batch of 8 reads W once
constexpr int kI8QuantWarps = 4;
constexpr int kI8SplitRows = 8;  // launches of at most this many rows may split K (decode)

// The part of K a split launch gives each block: none for more than kI8SplitRows rows, when the
// column blocks alone number kFillBlocks (lm_head's 197), or when G is no multiple of 32 (parts
// lie inside one group); else the longest of 32, 64, 128, ... k dividing G with which the blocks
// still number kFillBlocks (the fewer parts, the less traffic their sums cost), and at least
// 16 M k (so that the sums of M rows, written and read, stay within half of W's bytes): GPT-2
// small's (768, 768) linear takes 3 x 24 blocks at one row, 3 x 6 at eight. Not tuned on a GPU.
inline int i8_part_len(int M, int K, int N, int G) {
  const int cols = ceil_div(N, 4 * kI8Threads);
  if (M > kI8SplitRows || G % 32 != 0 || cols >= kFillBlocks) return 0;
  int part = 32;  // then longer with the rows: each part's sums cost 8 M / part of W's bytes
  while (G % (2 * part) == 0 && (cols * (K / (2 * part)) >= kFillBlocks || 2 * part <= 16 * M))
    part *= 2;
  return K / part > 1 ? part : 0;
}

// The scratch launches of up to M rows of K with N columns and groups of G need: the rows'
// scales, their codes, then for a split launch each part's integer sums (K / part, rows, N).
inline std::size_t i8_scratch_floats(int M, int K, int N, int G) {
  const int part = i8_part_len(imin(M, kI8SplitRows), K, N, G);
  const std::size_t sums =
      part ? static_cast<std::size_t>(K / part) * imin(M, kI8SplitRows) * N : 0;
  return static_cast<std::size_t>(M) + (static_cast<std::size_t>(M) * K + 3) / 4 + sums;
}

template <int kWarps>
__global__ void __launch_bounds__(kWarps * 32)
    quantize_rows_kernel(std::int8_t* codes, float* scales, const float* x, int M, int K) {
  const int lane = threadIdx.x % 32;
  const int m = blockIdx.x * kWarps + threadIdx.x / 32;
  if (m >= M) return;  // the whole warp together: no shuffle runs with a partial warp
  const float* xr = x + static_cast<int64_t>(m) * K;
  float a = 0.f;
  for (int k = lane; k < K; k += 32) a = s8_absmax_step(a, fabsf(xr[k]));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) a = s8_absmax_step(a, __shfl_xor_sync(simt::kFullMask, a, o));
  const float s = s8_scale(a);
  std::int8_t* q = codes + static_cast<int64_t>(m) * K;
  for (int k = lane; k < K; k += 32) q[k] = s8_code(xr[k], s);
  if (lane == 0) scales[m] = s;
}

// Byte j of each of w0..w3 (rows k..k+3 of column j) as one word, k in the low byte.
__device__ SERVEKIT_SIMT_INLINE int column_quad(unsigned w0, unsigned w1, unsigned w2, unsigned w3,
                                                int j) {
  const int sh = 8 * j;
  return static_cast<int>(((w0 >> sh) & 0xffu) | ((w1 >> sh) & 0xffu) << 8 |
                          ((w2 >> sh) & 0xffu) << 16 | ((w3 >> sh) & 0xffu) << 24);
}

// Row k of W, columns n..n+3 (bytes past N are zero).
__device__ SERVEKIT_SIMT_INLINE unsigned w_word(const LinearI8Params& p, int k, int n, bool vec) {
  const std::int8_t* r = p.q + static_cast<int64_t>(k) * p.N + n;
  if (vec) return *reinterpret_cast<const unsigned*>(r);
  unsigned w = 0;
  for (int j = 0; j < 4; j++)
    if (n + j < p.N) w |= static_cast<unsigned>(static_cast<std::uint8_t>(r[j])) << (8 * j);
  return w;
}

// The output's float chain, the same in every W8A8 kernel: y = fma(acc, s_x, b) written as one
// fma (a compiler left to contract `acc * s_x + b` may do so in one kernel and not another, and a
// row's bits would then depend on the kernel its launch took), the addend, the epilogue.
template <Epilogue E>
__device__ SERVEKIT_SIMT_INLINE void i8_store(const LinearI8Params& p, int m, int n, float acc,
                                              float sx) {
  const float v = fmaf(acc, sx, p.b ? p.b[n] : 0.f);
  store_epilogue<E>(p.out + static_cast<int64_t>(m) * p.N + n, with_addend(v, p.add, m, n, p.N));
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
