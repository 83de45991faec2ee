// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
#include "servekit/kernels/linear_i8_common.hpp"

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

// The tensor-core kernel, for launches of kI8MmaRows rows or more when whole groups are made of
// whole k32 steps (G and K multiples of 32): a block of 2 x 2 warps owns a (32 x 64) tile of
// out, warp (wm, wn) rows 16 wm.. and columns 32 wn.. as four m16n8 int32 accumulators. Per
// k32 step the block stages x's codes (32 rows x 32 bytes) and W's (32 k x 64 columns) turned
// into column quads (4 k of one column per word: the B fragment's register), so each fragment
// register is one 32-bit shared load; at each group's end the float chain of linear_i8.hpp. The
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
      i8_store<E>(p, m, n, acc[t][i], scales[m]);
    }
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
