// SPDX-License-Identifier: Apache-2.0
#pragma once
// Kernels of test_simt_block.cpp. Plain CUDA C++: the same file compiles with nvcc
// (scripts/check_nvcc_simt.sh) and runs on the CPU under the emulator. Included by one test file
// each: a __global__ function cannot be inline.
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

}  // namespace simt_test
