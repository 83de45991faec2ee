// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// What the W8A8 kernels share (linear_i8.hpp, linear_i8_mma.hpp): the launch's arguments, the
// quantisation of x's rows, W's words turned into column quads, the scratch's size and the
// output's float chain.
#include <algorithm>
#include <cstddef>
#include <cstdint>

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
constexpr int kI8SplitRows = 8;      // launches of at most this many rows split K (decode)
constexpr int kI8ShortPartRows = 4;  // ... in parts of 32 k up to this many rows, else 64

// The part of K a split launch gives each block: 32 k (64 for more than 4 rows, whose partial
// sums cost more traffic, when 64 divides G), so that a part lies in one group; 0 (no split)
// for groups that are not whole multiples of 32 rows, or when K is one part. Not tuned on a
// GPU.
inline int i8_part_len(int M, int K, int G) {
  if (M > kI8SplitRows || G % 32 != 0) return 0;
  const int len = M > kI8ShortPartRows ? 64 : 32;
  const int part = G % len == 0 ? len : 32;
  return K / part > 1 ? part : 0;
}

// The scratch launches of up to M rows of K with N columns and groups of G need: the rows'
// scales, their codes, then for a split launch each part's integer sums (K / part, rows, N), as
// much as the largest split launch of at most M rows takes (sized once, for every step).
inline std::size_t i8_scratch_floats(int M, int K, int N, int G) {
  std::size_t sums = 0;
  for (int m : {imin(M, kI8ShortPartRows), imin(M, kI8SplitRows)})
    if (const int part = i8_part_len(m, K, G))
      sums = std::max(sums, static_cast<std::size_t>(K / part) * m * N);
  return static_cast<std::size_t>(M) + (static_cast<std::size_t>(M) * K + 3) / 4 + sums;
}

// max |x| with symmetric_int8's rule: a NaN wins over every number.
__device__ SERVEKIT_SIMT_INLINE float absmax_step(float m, float a) {
  return a > m || a != a ? a : m;
}

template <int kWarps>
__global__ void __launch_bounds__(kWarps * 32)
    quantize_rows_kernel(std::int8_t* codes, float* scales, const float* x, int M, int K) {
  const int lane = threadIdx.x % 32;
  const int m = blockIdx.x * kWarps + threadIdx.x / 32;
  if (m >= M) return;  // the whole warp together: no shuffle runs with a partial warp
  const float* xr = x + static_cast<int64_t>(m) * K;
  float a = 0.f;
  for (int k = lane; k < K; k += 32) a = absmax_step(a, fabsf(xr[k]));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) a = absmax_step(a, __shfl_xor_sync(simt::kFullMask, a, o));
  const float s = a / 127.f;
  std::int8_t* q = codes + static_cast<int64_t>(m) * K;
  for (int k = lane; k < K; k += 32) {
    const float r = rintf(xr[k] / s);
    q[k] = s > 0.f && r == r ? static_cast<std::int8_t>(r) : std::int8_t{0};
  }
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
