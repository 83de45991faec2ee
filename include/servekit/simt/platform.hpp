// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// The CUDA language surface on both compilers. Under nvcc this is CUDA itself; under a host
// compiler the function qualifiers come from CUDA's own host_defines.h (pulled in by
// <cuda_fp16.h>) where they expand to nothing, and `__shared__` is redefined as `thread_local`:
// a function-scope thread_local is one object per OS thread, and a block runs on exactly one OS
// thread, so every fiber of the block sees the same array, as CUDA threads of a block do.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#define SERVEKIT_SIMT_DEVICE 1
#define SERVEKIT_SIMT_INLINE __forceinline__
#else
#include <vector_types.h>
#define SERVEKIT_SIMT_HOST 1
// Force-inlined on the host: the switch paths (barrier, shuffle) cost 2-3x more out of line.
#define SERVEKIT_SIMT_INLINE inline __attribute__((always_inline))

#undef __shared__
#define __shared__ thread_local
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
#ifndef __grid_constant__
#define __grid_constant__
#endif
// `__noinline__` stays undefined on purpose: libstdc++ and CCCL spell
// `__attribute__((__noinline__))`, which a macro of that name would break.

constexpr int warpSize = 32;
#endif

namespace servekit::simt {
inline namespace SERVEKIT_DEVICE_ABI {
inline constexpr int kWarpSize = 32;
inline constexpr int kMaxBlockThreads = 1024;
inline constexpr unsigned kFullMask = 0xffffffffu;
}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::simt
