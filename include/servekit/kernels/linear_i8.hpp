// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// out = epilogue(x @ W + b) for W8A8 W (weights::W8A8: int8 codes (K, N), a float scale per
// group): the launcher and the dp4a kernels.
//  1. quantize_rows (linear_i8_common.hpp): each row of x to int8 codes and a scale, one warp per
//     row, core/symmetric_int8.hpp's formula (max |x| / 127, x / s rounded to nearest even; a
//     NaN makes the scale NaN and the codes 0), into the caller's scratch.
//  2. the integer sums. linear_i8_kernel: a thread owns kI8Rows rows x 4 columns; a quad of W is
//     4 words of one (K, N) row each (4 k x 4 columns, coalesced across the warp), turned into
//     4 columns' words of 4 k by byte shifts, each multiplied into its rows' 4 codes by one
//     dp4a. For 16 rows or more, when groups are whole k32 steps, the same sums on tensor cores
//     (linear_i8_mma.hpp). Integer sums are exact in any order; the floats then follow the
//     host's and kernels/ref's chain:
//       acc = fma(s_w[g], float(isum_g), acc) over the groups, y = fma(acc, s_x, b)
//     so the emulated kernels give the host's bits (without a bias: the host rounds acc * s_x
//     before adding it) and a row's result depends on no other row or kernel.
//  3. decode launches (at most kI8SplitRows rows, groups of 32 rows or more) whose columns are
//     too few to fill the GPU split K (i8_part_len): a block per (columns, rows, part of K)
//     writes its integer sums to the scratch and a finishing launch adds each group's parts
//     (exactly: integers) and runs the same float chain, so a row gets the same bits split or
//     not. A GPT-2 small decode linear is otherwise 3 blocks of 2 warps.
// Not yet: a cp.async pipeline for the mma kernel.
#include <cstddef>
#include <cstdint>

#include "servekit/kernels/linear_i8_common.hpp"
#include "servekit/kernels/linear_i8_mma.hpp"

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

// isum (kI8Rows, 4) += rows m0.. (rows of them; the others repeat the last, never stored) x
// columns n0..n0+3 of W over k in [k0, k1).
__device__ SERVEKIT_SIMT_INLINE void i8_dot(int (&isum)[kI8Rows][4], const LinearI8Params& p,
                                            const std::int8_t* codes, bool vec, int m0, int rows,
                                            int n0, int k0, int k1) {
  for (int k = k0; k < k1; k += 4) {
    const unsigned w0 = w_word(p, k, n0, vec), w1 = w_word(p, k + 1, n0, vec),
                   w2 = w_word(p, k + 2, n0, vec), w3 = w_word(p, k + 3, n0, vec);
    int wc[4];
#pragma unroll
    for (int j = 0; j < 4; j++) wc[j] = column_quad(w0, w1, w2, w3, j);
#pragma unroll
    for (int r = 0; r < kI8Rows; r++) {
      const int64_t row = m0 + imin(r, rows - 1);
      const int xq = *reinterpret_cast<const int*>(codes + row * p.K + k);
#pragma unroll
      for (int j = 0; j < 4; j++) isum[r][j] = __dp4a(xq, wc[j], isum[r][j]);
    }
  }
}

// part_len 0: the whole of K, then the float chain and the output. Otherwise blockIdx.z's part
// of K, its integer sums to partial (K / part_len, M, N).
template <Epilogue E>
__global__ void __launch_bounds__(kI8Threads)
    linear_i8_kernel(const LinearI8Params p, const std::int8_t* codes, const float* scales,
                     bool vec, int* partial, int part_len) {
  const int n0 = (blockIdx.x * kI8Threads + threadIdx.x) * 4;
  const int m0 = blockIdx.y * kI8Rows;
  if (n0 >= p.N) return;
  const int rows = imin(kI8Rows, p.M - m0);
  if (part_len > 0) {
    int isum[kI8Rows][4] = {};
    const int k0 = blockIdx.z * part_len;
    i8_dot(isum, p, codes, vec, m0, rows, n0, k0, k0 + part_len);
    int* out = partial + static_cast<int64_t>(blockIdx.z) * p.M * p.N;
    for (int r = 0; r < rows; r++)
      for (int j = 0; j < 4 && n0 + j < p.N; j++)
        out[static_cast<int64_t>(m0 + r) * p.N + n0 + j] = isum[r][j];
    return;
  }
  const bool per_col = p.state_cols > 1;
  float acc[kI8Rows][4] = {};
  for (int g0 = 0; g0 < p.K; g0 += p.group_rows) {
    int isum[kI8Rows][4] = {};
    i8_dot(isum, p, codes, vec, m0, rows, n0, g0, g0 + p.group_rows);
    const float* sg = p.scale + static_cast<int64_t>(g0 / p.group_rows) * p.state_cols;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const float sw = sg[per_col ? imin(n0 + j, p.N - 1) : 0];
#pragma unroll
      for (int r = 0; r < kI8Rows; r++)
        acc[r][j] = fmaf(sw, static_cast<float>(isum[r][j]), acc[r][j]);
    }
  }
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < 4 && n0 + j < p.N; j++)
      i8_store<E>(p, m0 + r, n0 + j, acc[r][j], scales[m0 + r]);
}

// A split launch's finish: a thread per output, each group's parts added in order (integers:
// exact), then the chain as above.
constexpr int kI8FinishThreads = 64;
template <Epilogue E>
__global__ void __launch_bounds__(kI8FinishThreads)
    linear_i8_finish_kernel(const LinearI8Params p, const float* scales, const int* partial,
                            int part_len) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kI8FinishThreads + threadIdx.x;
  const int64_t mn = static_cast<int64_t>(p.M) * p.N;
  if (i >= mn) return;
  const int m = static_cast<int>(i / p.N), n = static_cast<int>(i % p.N);
  const int per_group = p.group_rows / part_len;
  float acc = 0.f;
  for (int g = 0; g < p.K / p.group_rows; g++) {
    int isum = 0;
    for (int q = g * per_group; q < (g + 1) * per_group; q++) isum += partial[q * mn + i];
    acc = fmaf(p.scale[static_cast<int64_t>(g) * p.state_cols + (p.state_cols > 1 ? n : 0)],
               static_cast<float>(isum), acc);
  }
  i8_store<E>(p, m, n, acc, scales[m]);
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
  const std::size_t need = i8_scratch_floats(p.M, p.K, p.N, p.group_rows);
  if (!scratch.partial || scratch.floats < need)
    fail(who, ": the activation codes of M = ", p.M, " rows of K = ", p.K, " need ", need,
         " floats of scratch (the decoder's split_k_size); given ", scratch.floats);
}

// scratch: i8_scratch_floats(M, K, N, G) floats (the decoder's split-K scratch, sized for the
// Int8 family by SimtOps::split_k_size).
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
  const int part = mma ? 0 : i8_part_len(p.M, p.K, p.N, p.group_rows);
  const int parts = part ? p.K / part : 1;
  const int row_tile = mma ? i8mma::BM : kI8Rows, col_tile = mma ? i8mma::BN : 4 * kI8Threads;
  const int row_tiles = ceil_div(p.M, row_tile), col_tiles = ceil_div(p.N, col_tile);
  const std::size_t w = static_cast<std::size_t>(p.K) * p.N +
                        static_cast<std::size_t>(p.K / p.group_rows) * p.state_cols * sizeof(float);
  const std::size_t mn = static_cast<std::size_t>(p.M) * p.N * sizeof(float);
  const std::size_t out = (p.b ? static_cast<std::size_t>(p.N) * sizeof(float) * row_tiles : 0) +
                          (p.add ? mn : 0) + (E == Epilogue::Residual ? mn : 0) + mn;
  // Each block reads its rows' codes over its part of K; a split launch writes its parts' sums.
  simt::expect_bytes(w * row_tiles + mk * col_tiles + (part ? mn * parts : out));
  const bool vec = p.N % 4 == 0 && reinterpret_cast<std::uintptr_t>(p.q) % 4 == 0;
  const auto* c = static_cast<const std::int8_t*>(codes);
  const auto* sc = static_cast<const float*>(scales);
  int* partial = reinterpret_cast<int*>(scratch.partial + p.M + (mk + 3) / 4);
  if (mma) {
    simt::launch(simt::kernel<linear_i8_mma_kernel<E>>, dim3(col_tiles, row_tiles),
                 dim3(i8mma::kThreads), 0, stream, p, c, sc, vec);
    return;
  }
  simt::launch(simt::kernel<linear_i8_kernel<E>>, dim3(col_tiles, row_tiles, parts),
               dim3(kI8Threads), 0, stream, p, c, sc, vec, partial, part);
  if (!part) return;
  simt::expect_bytes(mn * parts + static_cast<std::size_t>(p.M) * sizeof(float) + out);
  simt::launch(simt::kernel<linear_i8_finish_kernel<E>>,
               dim3(static_cast<unsigned>(ceil_div(p.M * p.N, kI8FinishThreads))),
               dim3(kI8FinishThreads), 0, stream, p, sc, static_cast<const int*>(partial), part);
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
