// SPDX-License-Identifier: Apache-2.0
#pragma once
// Kernels of test_simt_async.cpp (cp.async). Plain CUDA C++: the same file compiles with nvcc
// (scripts/check_nvcc_simt.sh) and runs on the CPU under the emulator.
#include <cstdint>

#include "servekit/simt/simt.hpp"

namespace simt_test {

namespace simt = servekit::simt;

// How async_tiles reads its two tiles.
enum class AsyncRead : int {
  Waited = 0,         // wait<1>, read tile 0; wait<0>, read tile 1: both have landed
  BeforeWait = 1,     // tile 0 read with no wait at all
  NewestPending = 2,  // wait<1> (tile 1 still in flight), then tile 1 read
};

// One warp copies two tiles of 128 floats (one 16-byte chunk per lane each) into shared memory
// by cp.async, in two groups, and writes what it then reads to out (256 floats).
__global__ void async_tiles(const float* src, float* out, int mode) {
  SERVEKIT_SHARED(float[2][128], tile);  // poisoned per block under the emulator
  const int lane = threadIdx.x;
  for (int t = 0; t < 2; ++t) {
    simt::cp_async_16(&tile[t][4 * lane], src + 128 * t + 4 * lane);
    simt::cp_async_commit();
  }
  const auto read = [&](int t) {
    __syncthreads();
    for (int i = lane; i < 128; i += 32) out[128 * t + i] = tile[t][i];
  };
  if (mode == static_cast<int>(AsyncRead::Waited)) {
    simt::cp_async_wait<1>();
    read(0);
    simt::cp_async_wait<0>();
    read(1);
  } else if (mode == static_cast<int>(AsyncRead::BeforeWait)) {
    read(0);
  } else {
    simt::cp_async_wait<1>();
    read(1);
  }
}

// Lane 0 copies 16 bytes of which the first src_bytes come from src, the rest are zeros.
__global__ void async_partial(const unsigned char* src, unsigned char* out, int src_bytes) {
  SERVEKIT_SHARED(unsigned char[16], buf);
  if (threadIdx.x == 0) {
    simt::cp_async_16(buf, src, src_bytes);
    simt::cp_async_commit();
    simt::cp_async_wait<0>();
    for (int i = 0; i < 16; ++i) out[i] = buf[i];
  }
}

}  // namespace simt_test
