// SPDX-License-Identifier: Apache-2.0
#pragma once
// Kernels the simt tests run. Plain CUDA C++: the same file compiles with nvcc
// (scripts/check_nvcc_simt.sh) and runs on the CPU under the emulator (tests/test_simt_*.cpp).
#include <cstdint>

#include "servekit/simt/simt.hpp"

namespace simt_test {

namespace simt = servekit::simt;

// Sum of a warp's values, every lane gets it.
__device__ __forceinline__ int warp_sum(int v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// out[blockIdx.x] = sum of x[block's range]; blockDim.x a multiple of 32, any n.
__global__ void block_sum(const int* x, int* out, int n) {
  __shared__ int warp_sums[32];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = warp_sum(i < n ? x[i] : 0);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = warp_sum(threadIdx.x < blockDim.x / 32 ? warp_sums[threadIdx.x] : 0);
    if (threadIdx.x == 0) out[blockIdx.x] = v;
  }
}

// `rounds` times: every thread reads its right neighbour's value, barrier, writes its own
// (value + round), barrier. Any missing barrier mixes rounds. x: (blockDim.x)
__global__ void rotate_rounds(int* x, int rounds) {
  __shared__ int s[1024];
  const int t = threadIdx.x, n = blockDim.x;
  s[t] = x[t];
  __syncthreads();
  for (int r = 0; r < rounds; ++r) {
    const int v = s[(t + 1) % n];
    __syncthreads();
    s[t] = v + r;
    __syncthreads();
  }
  x[t] = s[t];
}

// Every shuffle of every thread: out (blockDim.x, 4) = idx, up, down, xor results of
// value = 1000 * tid + 7.
__global__ void shuffles(int* out, int src_lane, unsigned delta, int lane_mask, int width) {
  const int t = threadIdx.x;
  const int v = 1000 * t + 7;
  out[4 * t + 0] = __shfl_sync(0xffffffffu, v, src_lane, width);
  out[4 * t + 1] = __shfl_up_sync(0xffffffffu, v, delta, width);
  out[4 * t + 2] = __shfl_down_sync(0xffffffffu, v, delta, width);
  out[4 * t + 3] = __shfl_xor_sync(0xffffffffu, v, lane_mask, width);
}

// Shuffles of float and double and of a half-warp mask (lanes 0-15 only). out (blockDim.x, 3)
__global__ void shuffle_types(float* out) {
  const int t = threadIdx.x, lane = t % 32;
  const float f = 0.5f * t;
  const double d = 0.25 * t;
  out[3 * t + 0] = __shfl_down_sync(0xffffffffu, f, 3);
  out[3 * t + 1] = static_cast<float>(__shfl_sync(0xffffffffu, d, 31 - lane));
  out[3 * t + 2] = lane < 16 ? __shfl_xor_sync(0x0000ffffu, f, 1) : -1.0f;
}

// out (blockDim.x, 3) = ballot, any, all of pred[t].
__global__ void votes(const int* pred, unsigned* out) {
  const int t = threadIdx.x;
  out[3 * t + 0] = __ballot_sync(0xffffffffu, pred[t]);
  out[3 * t + 1] = __any_sync(0xffffffffu, pred[t]);
  out[3 * t + 2] = __all_sync(0xffffffffu, pred[t]);
}

// Every thread of every block adds into a few counters. c: int sum, unsigned max, float sum,
// int via CAS loop, last writer via exch (any thread id).
__global__ void atomics(int* isum, unsigned* umax, float* fsum, int* cas_sum, int* exch,
                        float* fmax, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  atomicAdd(isum, i % 7);
  atomicMax(umax, static_cast<unsigned>((i * 37) % 1001));
  atomicAdd(fsum, 1.0f);
  int old = *cas_sum, seen;
  while ((seen = atomicCAS(cas_sum, old, old + 2)) != old) old = seen;
  atomicExch(exch, i);
  simt::atomic_max(fmax, 0.001f * static_cast<float>((i * 53) % 997));
}

// Reverses each block's slice of x through dynamic shared memory (blockDim.x ints) and
// doubles it through a static one.
__global__ void reverse_smem(const int* x, int* out, int n) {
  __shared__ int doubled[256];
  int* s = simt::dynamic_smem<int>();
  const int t = threadIdx.x, base = blockIdx.x * blockDim.x;
  s[t] = base + t < n ? x[base + t] : 0;
  doubled[t] = 2 * s[t];
  __syncthreads();
  const int j = blockDim.x - 1 - t;
  if (base + t < n) out[base + t] = s[j] + doubled[j];
}

// Block 0 waits until block 1 has run: proves two blocks run at the same time on two OS threads
// (with one, block 0 would give up). flags: (2) zeroed; out: 1 when block 0 saw block 1.
__global__ void handshake(int* flags, int* out) {
  if (threadIdx.x != 0) return;
  if (blockIdx.x == 1) {
    atomicExch(&flags[1], 1);
    return;
  }
  for (long long spin = 0; spin < 2000000000LL; ++spin) {
    if (atomicAdd(&flags[1], 0) == 1) {
      *out = 1;
      return;
    }
  }
}

// C (M, N) = A (M, K) @ B (K, N), row-major, 16x16 tiles through shared memory.
constexpr int kTile = 16;
__global__ void sgemm_tiled(const float* a, const float* b, float* c, int m, int n, int k) {
  __shared__ float as[kTile][kTile];
  __shared__ float bs[kTile][kTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * kTile + ty, col = blockIdx.x * kTile + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < k; k0 += kTile) {
    as[ty][tx] = row < m && k0 + tx < k ? a[row * k + k0 + tx] : 0.0f;
    bs[ty][tx] = col < n && k0 + ty < k ? b[(k0 + ty) * n + col] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTile; ++kk) acc += as[ty][kk] * bs[kk][tx];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = acc;
}

// One warp, one m16n8k16 tile: fragments read from global memory by the documented layout.
// a (16, 16) row-major, b (16, 8) as (k, n) row-major, c/d (16, 8) row-major. 16-bit inputs
// as raw bits; kBf16 picks the input type.
template <bool kBf16>
__global__ void mma_tile(const std::uint16_t* a, const std::uint16_t* b, const float* c,
                         float* d) {
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
