// SPDX-License-Identifier: Apache-2.0
#pragma once
// Kernels of test_simt_schedule.cpp: two with a race that the emulator's default order hides,
// and their fixed versions. Plain CUDA C++ (scripts/check_nvcc_simt.sh compiles them too).
#include "servekit/simt/simt.hpp"

namespace simt_test {

// out[t] = t's left neighbour's value, read from shared memory. Racy: without the barrier,
// thread t reads s[t - 1] before thread t - 1 may have written it; FIFO runs t - 1 first.
template <bool kBarrier>
__global__ void left_neighbour(int* out) {
  SERVEKIT_SHARED(int[256], s);
  const int t = threadIdx.x;
  s[t] = 10 * t + blockIdx.x;
  if constexpr (kBarrier) __syncthreads();
  out[blockIdx.x * blockDim.x + t] = t > 0 ? s[t - 1] : -1;
}

// Each block sums its threads' values in a shared accumulator. Racy: the accumulator is not
// zeroed (a thread_local `__shared__` would keep the last block's sum, or start at 0 in the
// first block), and thread 0's zeroing is not separated from the others' adds by a barrier.
template <bool kFixed>
__global__ void block_total(int* out) {
  SERVEKIT_SHARED(int, acc);
  if constexpr (kFixed) {
    if (threadIdx.x == 0) acc = 0;
    __syncthreads();
  }
  atomicAdd(&acc, static_cast<int>(threadIdx.x) + 1);
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = acc;
}

}  // namespace simt_test
