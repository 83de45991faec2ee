// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// threadIdx / blockIdx / blockDim / gridDim. On the host they are per-OS-thread globals: the block
// runner writes blockIdx/blockDim/gridDim once per block and threadIdx at every fiber switch, so
// kernel code reads them exactly as it does on a GPU.
#include "servekit/simt/platform.hpp"

#if defined(SERVEKIT_SIMT_HOST)
inline thread_local uint3 threadIdx{0, 0, 0};
inline thread_local uint3 blockIdx{0, 0, 0};
inline thread_local dim3 blockDim{1, 1, 1};
inline thread_local dim3 gridDim{1, 1, 1};
#endif

namespace servekit::simt {
inline namespace SERVEKIT_DEVICE_ABI {

__host__ __device__ inline constexpr unsigned long long volume(dim3 d) {
  return static_cast<unsigned long long>(d.x) * d.y * d.z;
}

// Linear index of a thread in its block, x fastest (CUDA's warp numbering).
__host__ __device__ inline constexpr unsigned linear_index(uint3 i, dim3 d) {
  return i.x + d.x * (i.y + d.y * i.z);
}

__host__ __device__ inline constexpr uint3 unlinear_index(unsigned long long l, dim3 d) {
  return uint3{static_cast<unsigned>(l % d.x), static_cast<unsigned>((l / d.x) % d.y),
               static_cast<unsigned>(l / (static_cast<unsigned long long>(d.x) * d.y))};
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::simt
