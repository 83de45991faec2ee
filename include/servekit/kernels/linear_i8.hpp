// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// out = epilogue(x @ W + b) for W8A8 W (weights::W8A8: int8 codes (K, N), a float scale per
// group), on CUDA cores with dp4a: two launches.
//  1. quantize_rows: each row of x to int8 codes and a scale, one warp per row, core/
//     symmetric_int8.hpp's formula (max |x| / 127, x / s rounded to nearest even; a NaN makes
//     the scale NaN and the codes 0), into the caller's scratch.
//  2. the dot products: a thread owns kI8Rows rows x 4 columns. A quad of W is 4 words of one
//     (K, N) row each (4 k x 4 columns, coalesced across the warp), turned into 4 columns' words
//     of 4 k by byte shifts, each multiplied into its rows' 4 codes by one dp4a. Integer sums
//     are exact in any order; the floats then follow the host's and kernels/ref's chain:
//       acc = fma(s_w[g], float(isum_g), acc) over the groups, y = fma(acc, s_x, b)
//     so the emulated kernels give the host's bits (without a bias: the host rounds acc * s_x
//     before adding it) and a row's result depends on no other row.
//  3. for 16 rows or more, when groups are whole k32 steps, the same sums on tensor cores
//     (mma.sync m16n8k32 s8, linear_i8_mma_kernel below).
// Not yet: a split over K for decode launches, and a cp.async pipeline for the mma kernel.
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

constexpr int kI8Threads = 128;  // dot-product threads per block: 512 columns
constexpr int kI8Rows = 4;       // rows of x per thread
constexpr int kI8QuantWarps = 4;

// The scratch the launches need for M rows of K: the rows' scales, then their codes.
inline std::size_t i8_scratch_floats(int M, int K) {
  return static_cast<std::size_t>(M) + (static_cast<std::size_t>(M) * K + 3) / 4;
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

template <Epilogue E>
__global__ void __launch_bounds__(kI8Threads)
    linear_i8_kernel(const LinearI8Params p, const std::int8_t* codes, const float* scales,
                     bool vec) {
  const int n0 = (blockIdx.x * kI8Threads + threadIdx.x) * 4;
  const int m0 = blockIdx.y * kI8Rows;
  if (n0 >= p.N) return;
  const int rows = imin(kI8Rows, p.M - m0);
  const bool per_col = p.state_cols > 1;
  float acc[kI8Rows][4] = {};
  for (int g0 = 0; g0 < p.K; g0 += p.group_rows) {
    int isum[kI8Rows][4] = {};
    for (int k = g0; k < g0 + p.group_rows; k += 4) {
      const unsigned w0 = w_word(p, k, n0, vec), w1 = w_word(p, k + 1, n0, vec),
                     w2 = w_word(p, k + 2, n0, vec), w3 = w_word(p, k + 3, n0, vec);
      int wc[4];
#pragma unroll
      for (int j = 0; j < 4; j++) wc[j] = column_quad(w0, w1, w2, w3, j);
        // A tile's missing rows repeat its last (their sums are never stored): no branch.
#pragma unroll
      for (int r = 0; r < kI8Rows; r++) {
        const int64_t row = m0 + imin(r, rows - 1);
        const int xq = *reinterpret_cast<const int*>(codes + row * p.K + k);
#pragma unroll
        for (int j = 0; j < 4; j++) isum[r][j] = __dp4a(xq, wc[j], isum[r][j]);
      }
    }
    const float* sg = p.scale + static_cast<int64_t>(g0 / p.group_rows) * p.state_cols;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const float sw = sg[per_col ? imin(n0 + j, p.N - 1) : 0];
#pragma unroll
      for (int r = 0; r < kI8Rows; r++)
        acc[r][j] = fmaf(sw, static_cast<float>(isum[r][j]), acc[r][j]);
    }
  }
#pragma unroll
  for (int r = 0; r < kI8Rows; r++) {
    const int m = m0 + r;
    if (r >= rows) continue;
    const float sx = scales[m];
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const int n = n0 + j;
      if (n >= p.N) continue;
      // One fma, written out: a compiler left to contract `acc * sx + b` may do so in one kernel
      // and not the other, and a row's bits would depend on which kernel its launch took.
      const float v = fmaf(acc[r][j], sx, p.b ? p.b[n] : 0.f);
      store_epilogue<E>(p.out + static_cast<int64_t>(m) * p.N + n,
                        with_addend(v, p.add, m, n, p.N));
    }
  }
}

// The tensor-core kernel, for launches of kI8MmaRows rows or more when whole groups are made of
// whole k32 steps (G and K multiples of 32): a block of 2 x 2 warps owns a (32 x 64) tile of
// out, warp (wm, wn) rows 16 wm.. and columns 32 wn.. as four m16n8 int32 accumulators. Per
// k32 step the block stages x's codes (32 rows x 32 bytes) and W's (32 k x 64 columns) turned
// into column quads (4 k of one column per word: the B fragment's register), so each fragment
// register is one 32-bit shared load; at each group's end the same float chain as above. The
// sums are the dp4a kernel's integers, so a row gets the same bits from either kernel.
namespace i8mma {
constexpr int BM = 32, BN = 64, BK = 32, kThreads = 128;
// Rows padded so that a fragment load's 32 words fall in 32 banks: x's 8 rows x 4 words at a
// row stride of 12 words, W's 4 quad rows x 8 columns at a stride of 72.
constexpr int kARow = BK / 4 + 4, kBRow = BN + 8;
struct SharedStorage {
  unsigned a[BM][kARow];      // codes of x (BM, BK), 4 k a word
  unsigned b[BK / 4][kBRow];  // column quads of W (BK / 4, BN)
};
}  // namespace i8mma
constexpr int kI8MmaRows = 16;

template <Epilogue E>
__global__ void __launch_bounds__(i8mma::kThreads)
    linear_i8_mma_kernel(const LinearI8Params p, const std::int8_t* codes, const float* scales,
                         bool vec) {
  using namespace i8mma;
  namespace L = simt::mma_layout;
  SERVEKIT_SHARED(SharedStorage, s);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / 2, wn = warp % 2;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const bool per_col = p.state_cols > 1;
  float acc[4][4] = {};  // (n8 tile, fragment element)
  for (int g0 = 0; g0 < p.K; g0 += p.group_rows) {
    int isum[4][4] = {};
    for (int k0 = g0; k0 < g0 + p.group_rows; k0 += BK) {
      // x: 32 rows x 8 words, two a thread; rows past M stage zeros.
      for (int i = tid; i < BM * BK / 4; i += kThreads) {
        const int r = i / (BK / 4), q = i % (BK / 4);
        s.a[r][q] = m0 + r < p.M ? *reinterpret_cast<const unsigned*>(
                                       codes + static_cast<int64_t>(m0 + r) * p.K + k0 + 4 * q)
                                 : 0u;
      }
      // W: 8 quads of k x 16 groups of 4 columns, one a thread.
      {
        const int q = tid / (BN / 4), c = tid % (BN / 4) * 4;
        const int k = k0 + 4 * q, n = n0 + c;
        unsigned w[4] = {};
        if (n < p.N)
          for (int i = 0; i < 4; i++) w[i] = w_word(p, k + i, n, vec);
#pragma unroll
        for (int j = 0; j < 4; j++)
          s.b[q][c + j] = static_cast<unsigned>(column_quad(w[0], w[1], w[2], w[3], j));
      }
      __syncthreads();
      std::uint32_t a[4];
#pragma unroll
      for (int r = 0; r < 4; r++)  // element 4r's row and first k: 4 bytes in one word
        a[r] = s.a[16 * wm + L::a8_row(lane, 4 * r)][L::a8_col(lane, 4 * r) / 4];
#pragma unroll
      for (int t = 0; t < 4; t++) {
        const int col = 32 * wn + 8 * t + L::b8_col(lane, 0);
        const std::uint32_t b[2] = {s.b[L::b8_row(lane, 0) / 4][col],
                                    s.b[L::b8_row(lane, 4) / 4][col]};
        simt::mma_m16n8k32_s8s32(isum[t], a, b, isum[t]);
      }
      __syncthreads();
    }
    const float* sg = p.scale + static_cast<int64_t>(g0 / p.group_rows) * p.state_cols;
#pragma unroll
    for (int t = 0; t < 4; t++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int n = imin(n0 + 32 * wn + 8 * t + L::c_col(lane, i), p.N - 1);
        acc[t][i] = fmaf(sg[per_col ? n : 0], static_cast<float>(isum[t][i]), acc[t][i]);
      }
  }
#pragma unroll
  for (int t = 0; t < 4; t++)
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int m = m0 + 16 * wm + L::c_row(lane, i);
      const int n = n0 + 32 * wn + 8 * t + L::c_col(lane, i);
      if (m >= p.M || n >= p.N) continue;
      const float v = fmaf(acc[t][i], scales[m], p.b ? p.b[n] : 0.f);  // as linear_i8_kernel
      store_epilogue<E>(p.out + static_cast<int64_t>(m) * p.N + n,
                        with_addend(v, p.add, m, n, p.N));
    }
}

// What the kernels can run: a positive shape, groups of a multiple of 4 rows dividing K, one
// scale per tensor or per column, and a scratch with room for the rows' codes.
inline void check_linear_i8(const LinearI8Params& p, const SplitK& scratch) {
  constexpr const char* who = "kernels::linear_i8";
  if (p.M < 1 || p.K < 1 || p.N < 1)
    fail(who, ": cannot run the shape M = ", p.M, ", K = ", p.K, ", N = ", p.N);
  if (p.group_rows < 4 || p.group_rows % 4 != 0 || p.K % p.group_rows != 0)
    fail(who, ": group size G = ", p.group_rows, " must be a multiple of 4 dividing K = ", p.K,
         " (the input rows of the (K, N) = (", p.K, ", ", p.N, ") matrix)");
  if (p.state_cols != 1 && p.state_cols != p.N)
    fail(who, ": ", p.state_cols, " scale columns for N = ", p.N,
         " output columns: need 1 (per tensor) or N (per column)");
  if (ceil_div(p.M, kI8Rows) > 65535) fail(who, ": M = ", p.M, " needs more than 65535 row tiles");
  const std::size_t need = i8_scratch_floats(p.M, p.K);
  if (!scratch.partial || scratch.floats < need)
    fail(who, ": the activation codes of M = ", p.M, " rows of K = ", p.K, " need ", need,
         " floats of scratch (the decoder's split_k_size); given ", scratch.floats);
}

// scratch: i8_scratch_floats(M, K) floats (the decoder's split-K scratch, sized for the Int8
// family by SimtOps::split_k_size).
template <Epilogue E>
void linear_i8(const LinearI8Params& p, simt::stream_handle stream, const SplitK& scratch) {
  check_linear_i8(p, scratch);
  float* scales = scratch.partial;
  auto* codes = reinterpret_cast<std::int8_t*>(scratch.partial + p.M);
  const std::size_t mk = static_cast<std::size_t>(p.M) * p.K;
  simt::expect_bytes(mk * (sizeof(float) + 1) + static_cast<std::size_t>(p.M) * sizeof(float));
  simt::launch(simt::kernel<quantize_rows_kernel<kI8QuantWarps>>,
               dim3(ceil_div(p.M, kI8QuantWarps)), dim3(kI8QuantWarps * 32), 0, stream, codes,
               scales, p.x, p.M, p.K);
  const bool mma = p.M >= kI8MmaRows && p.group_rows % i8mma::BK == 0;
  const int row_tile = mma ? i8mma::BM : kI8Rows, col_tile = mma ? i8mma::BN : 4 * kI8Threads;
  const int row_tiles = ceil_div(p.M, row_tile), col_tiles = ceil_div(p.N, col_tile);
  const std::size_t w = static_cast<std::size_t>(p.K) * p.N +
                        static_cast<std::size_t>(p.K / p.group_rows) * p.state_cols * sizeof(float);
  const std::size_t mn = static_cast<std::size_t>(p.M) * p.N * sizeof(float);
  simt::expect_bytes(w * row_tiles + mk * col_tiles +
                     (p.b ? static_cast<std::size_t>(p.N) * sizeof(float) * row_tiles : 0) +
                     (p.add ? mn : 0) + (E == Epilogue::Residual ? mn : 0) + mn);
  const bool vec = p.N % 4 == 0 && reinterpret_cast<std::uintptr_t>(p.q) % 4 == 0;
  const auto* c = static_cast<const std::int8_t*>(codes);
  const auto* sc = static_cast<const float*>(scales);
  if (mma)
    simt::launch(simt::kernel<linear_i8_mma_kernel<E>>, dim3(col_tiles, row_tiles),
                 dim3(i8mma::kThreads), 0, stream, p, c, sc, vec);
  else
    simt::launch(simt::kernel<linear_i8_kernel<E>>, dim3(col_tiles, row_tiles), dim3(kI8Threads), 0,
                 stream, p, c, sc, vec);
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
