// SPDX-License-Identifier: Apache-2.0
#pragma once
// Kernels of test_simt_warp.cpp. Plain CUDA C++: the same file compiles with nvcc
// (scripts/check_nvcc_simt.sh) and runs on the CPU under the emulator. Included by one test file
// each: a __global__ function cannot be inline.
#include <cstdint>

#include "servekit/simt/simt.hpp"

namespace simt_test {

namespace simt = servekit::simt;

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

}  // namespace simt_test
