// SPDX-License-Identifier: Apache-2.0
#pragma once
// Small functions that host code and the kernels both call (random draws, KV addressing),
// written once. SERVEKIT_HD is __host__ __device__ under nvcc and nothing under a host compiler
// (the host backend, and the emulator, whose kernels are host code). SERVEKIT_FORCE_INLINE
// keeps such a helper inline on both, as the emulator's own helpers are. No CUDA header is
// needed, so host-only builds include this too.

// SERVEKIT_DEVICE_ABI: the inline namespace of the kernels (kernels/) and the simt layer
// (simt/). The same source means CUDA under nvcc and fibers on the CPU under a host compiler;
// the two get different symbol names, so that one program may hold the Cuda and the Emulated
// backend's code (the CLI does) without the linker taking one's kernel or launcher for the
// other's.
#if defined(__CUDACC__)
#define SERVEKIT_DEVICE_ABI cuda
#define SERVEKIT_HD __host__ __device__
#define SERVEKIT_FORCE_INLINE __forceinline__
#else
#define SERVEKIT_DEVICE_ABI emulated
#define SERVEKIT_HD
#define SERVEKIT_FORCE_INLINE __attribute__((always_inline))
#endif
