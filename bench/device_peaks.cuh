// SPDX-License-Identifier: Apache-2.0
#pragma once
// The device's roofline, measured in the run that is compared with it: the streaming read
// bandwidth (every step must read its weights) and the fp32 multiply-add rate of the CUDA cores
// (what the FLOPs of a LoRA shrink and expand cost at best). The device twin of common.hpp's
// read_bandwidth_gbs and fma_gflops.
#include <algorithm>

#include "servekit/backend/cuda.hpp"

namespace servekit::bench {

// Each block sums a grid-strided share of the buffer in 16-byte loads.
__global__ void stream_read(const float4* p, long long n, float* out) {
  float s = 0;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float4 v = p[i];
    s += v.x + v.y + v.z + v.w;
  }
  if (s == 12345.f) out[blockIdx.x] = s;  // keeps the loads; never true for the zeroed buffer
}

// Each thread runs 8 independent chains of `iters` FMAs (enough to hide their latency).
__global__ void fma_chains(float* out, int iters) {
  float a[8];
  for (int j = 0; j < 8; j++) a[j] = threadIdx.x + j;
  const float m = 0.999f, c = 1e-3f;
  for (int i = 0; i < iters; i++)
    for (int j = 0; j < 8; j++) a[j] = fmaf(a[j], m, c);
  float s = 0;
  for (int j = 0; j < 8; j++) s += a[j];
  if (s == 12345.f) out[blockIdx.x] = s;  // keeps the chains
}

// Best of 5 reads of 2 GiB, much larger than L2: GB/s.
inline double device_read_gbs() {
  namespace simt = servekit::simt;
  const long long n = (2ll << 30) / sizeof(float4);
  simt::DeviceBuffer<float4> buf(static_cast<std::size_t>(n));
  simt::DeviceBuffer<float> out(132 * 8);
  buf.fill_bytes(0);
  simt::Stream s;
  double best = 0;
  for (int r = 0; r < 6; r++) {
    simt::Event a, b;
    a.record(s);
    simt::launch(simt::kernel<stream_read>, dim3(132 * 8), dim3(512), 0, s.handle(), buf.data(), n,
                 out.data());
    b.record(s);
    const double ms = elapsed_ms(a, b);
    if (r > 0) best = std::max(best, n * sizeof(float4) / (ms * 1e-3) / 1e9);
  }
  return best;
}

// Best of 5 launches of 8 blocks per SM of 256 threads: GFLOP/s (2 per FMA).
inline double device_fma_gflops() {
  namespace simt = servekit::simt;
  int dev = 0, sms = 0;
  simt::check(cudaGetDevice(&dev), "cudaGetDevice");
  simt::check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
              "cudaDeviceGetAttribute");
  const int blocks = sms * 8, threads = 256, iters = 4096;
  simt::DeviceBuffer<float> out(static_cast<std::size_t>(blocks));
  simt::Stream s;
  double best = 0;
  for (int r = 0; r < 6; r++) {
    simt::Event a, b;
    a.record(s);
    simt::launch(simt::kernel<fma_chains>, dim3(blocks), dim3(threads), 0, s.handle(), out.data(),
                 iters);
    b.record(s);
    const double ms = elapsed_ms(a, b);
    if (r > 0) best = std::max(best, 2.0 * 8 * iters * blocks * threads / (ms * 1e-3) / 1e9);
  }
  return best;
}

}  // namespace servekit::bench
