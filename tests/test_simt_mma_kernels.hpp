// SPDX-License-Identifier: Apache-2.0
#pragma once
// Kernels of test_simt_mma.cpp. Plain CUDA C++: the same file compiles with nvcc
// (scripts/check_nvcc_simt.sh) and runs on the CPU under the emulator. Included by one test file
// each: a __global__ function cannot be inline.
#include <cstdint>

#include "servekit/simt/simt.hpp"

namespace simt_test {

namespace simt = servekit::simt;

// One warp, one m16n8k16 tile: fragments read from global memory by the documented layout.
// a (16, 16) row-major, b (16, 8) as (k, n) row-major, c/d (16, 8) row-major. 16-bit inputs
// as raw bits; kBf16 picks the input type.
template <bool kBf16>
__global__ void mma_tile(const std::uint16_t* a, const std::uint16_t* b, const float* c, float* d) {
  namespace L = simt::mma_layout;
  const int lane = threadIdx.x;
  std::uint32_t af[4], bf[2];
  float cf[4], df[4];
  for (int r = 0; r < 4; ++r)
    af[r] = simt::pack_b16(a[L::a_row(lane, 2 * r) * 16 + L::a_col(lane, 2 * r)],
                           a[L::a_row(lane, 2 * r + 1) * 16 + L::a_col(lane, 2 * r + 1)]);
  for (int r = 0; r < 2; ++r)
    bf[r] = simt::pack_b16(b[L::b_row(lane, 2 * r) * 8 + L::b_col(lane, 2 * r)],
                           b[L::b_row(lane, 2 * r + 1) * 8 + L::b_col(lane, 2 * r + 1)]);
  for (int i = 0; i < 4; ++i) cf[i] = c[L::c_row(lane, i) * 8 + L::c_col(lane, i)];
  if constexpr (kBf16)
    simt::mma_m16n8k16_bf16f32(df, af, bf, cf);
  else
    simt::mma_m16n8k16_f16f32(df, af, bf, cf);
  for (int i = 0; i < 4; ++i) d[L::c_row(lane, i) * 8 + L::c_col(lane, i)] = df[i];
}

// One warp, one m16n8k32 int8 tile: a (16, 32) row-major, b (32, 8) as (k, n) row-major, c/d
// (16, 8) row-major int32; fragments gathered by mma_layout's a8 / b8 / c layouts.
__global__ void mma_tile_s8(const std::int8_t* a, const std::int8_t* b, const std::int32_t* c,
                            std::int32_t* d) {
  namespace L = simt::mma_layout;
  const int lane = threadIdx.x;
  std::uint32_t af[4] = {}, bf[2] = {};
  std::int32_t cf[4], df[4];
  for (int i = 0; i < 16; ++i)
    af[i / 4] |= static_cast<std::uint32_t>(
                     static_cast<std::uint8_t>(a[L::a8_row(lane, i) * 32 + L::a8_col(lane, i)]))
                 << (8 * (i % 4));
  for (int i = 0; i < 8; ++i)
    bf[i / 4] |= static_cast<std::uint32_t>(
                     static_cast<std::uint8_t>(b[L::b8_row(lane, i) * 8 + L::b8_col(lane, i)]))
                 << (8 * (i % 4));
  for (int i = 0; i < 4; ++i) cf[i] = c[L::c_row(lane, i) * 8 + L::c_col(lane, i)];
  simt::mma_m16n8k32_s8s32(df, af, bf, cf);
  for (int i = 0; i < 4; ++i) d[L::c_row(lane, i) * 8 + L::c_col(lane, i)] = df[i];
}

// ldmatrix of every variant from a (16, 16) half tile in shared memory; out (32 lanes, 12):
// x4 (4 regs), x2 (2), x4.trans (4), x2.trans (2).
__global__ void ldmatrix_all(const std::uint16_t* tile, std::uint32_t* out) {
  __shared__ __align__(16) std::uint16_t s[16 * 16];
  const int lane = threadIdx.x;
  for (int i = lane; i < 256; i += 32) s[i] = tile[i];
  __syncwarp();
  // Lane l gives row (l % 8) of matrix l / 8: matrices (rows 0-7 | 8-15) x (cols 0-7 | 8-15).
  const int j = lane / 8, r = lane % 8;
  const std::uint16_t* row = &s[((j & 1) * 8 + r) * 16 + (j >> 1) * 8];
  std::uint32_t* o = out + 12 * lane;
  simt::ldmatrix_x4(o, row);
  simt::ldmatrix_x2(o + 4, row);
  simt::ldmatrix_x4_trans(o + 6, row);
  simt::ldmatrix_x2_trans(o + 10, row);
}

// C (M, N) = A (M, K) @ B (K, N) on tensor cores, f16 in, f32 out; M % 16 == 0, N % 8 == 0,
// K % 16 == 0. One warp per 16x8 tile of C; tiles staged in shared memory and read with
// ldmatrix (A straight, B transposed), so fragment layouts come from ldmatrix, not from
// mma_layout.
__global__ void hgemm_mma(const __half* a, const __half* b, float* c, int m, int n, int k) {
  __shared__ __align__(16) __half as[4][16 * 16];
  __shared__ __align__(16) __half bs[4][16 * 8];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tile = blockIdx.x * 4 + warp;
  const int tiles_n = n / 8;
  const bool active = tile < (m / 16) * tiles_n;
  const int m0 = active ? tile / tiles_n * 16 : 0, n0 = active ? tile % tiles_n * 8 : 0;
  float acc[4] = {0, 0, 0, 0};
  for (int k0 = 0; k0 < k; k0 += 16) {
    for (int i = lane; i < 256; i += 32) as[warp][i] = a[(m0 + i / 16) * k + k0 + i % 16];
    for (int i = lane; i < 128; i += 32) bs[warp][i] = b[(k0 + i / 8) * n + n0 + i % 8];
    __syncwarp();
    std::uint32_t af[4], bf[2];
    const int j = lane / 8, r = lane % 8;
    simt::ldmatrix_x4(af, &as[warp][((j & 1) * 8 + r) * 16 + (j >> 1) * 8]);
    simt::ldmatrix_x2_trans(bf, &bs[warp][((j & 1) * 8 + r) * 8]);
    simt::mma_m16n8k16_f16f32(acc, af, bf, acc);
    __syncwarp();
  }
  if (!active) return;
  namespace L = simt::mma_layout;
  for (int i = 0; i < 4; ++i) c[(m0 + L::c_row(lane, i)) * n + n0 + L::c_col(lane, i)] = acc[i];
}

}  // namespace simt_test
