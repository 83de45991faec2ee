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

// A three-buffer pipeline, as linear_mma's: one warp streams `tiles` tiles of 128 floats
// through buf, each lane copying 16 bytes of tile t + 2 while the warp sums tile t, and writes
// its sum of every tile's every element to out[lane]. kRefillAfterBarrier: the refill of
// buf[(t + 2) % 3], which held tile t - 1, waits for the barrier that says every lane is done
// with tile t - 1. Without it a lane that runs ahead overwrites a tile the others still read:
// a race that only copies landing early (before their wait) show.
template <bool kRefillAfterBarrier>
__global__ void async_pipeline(const float* src /* (tiles, 128) */, float* out /* (32) */,
                               int tiles) {
  SERVEKIT_SHARED(float[3][128], buf);
  const int lane = threadIdx.x;
  auto refill = [&](int t) {  // an empty group past the last tile keeps wait<1> uniform
    if (t < tiles) simt::cp_async_16(&buf[t % 3][4 * lane], src + 128 * t + 4 * lane);
    simt::cp_async_commit();
  };
  refill(0);
  refill(1);
  float sum = 0.f;
  for (int t = 0; t < tiles; ++t) {
    simt::cp_async_wait<1>();  // tile t has landed; t + 1 may be in flight
    if (!kRefillAfterBarrier) refill(t + 2);
    __syncthreads();
    if (kRefillAfterBarrier) refill(t + 2);
    for (int i = 0; i < 128; ++i) sum += buf[t % 3][i];
  }
  out[lane] = sum;
}

}  // namespace simt_test
