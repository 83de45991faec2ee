// SPDX-License-Identifier: Apache-2.0
#pragma once
// Small functions that host code and the kernels both call (random draws, KV addressing),
// written once. SERVEKIT_HD is __host__ __device__ under nvcc and nothing under a host compiler
// (the host backend, and the emulator, whose kernels are host code). SERVEKIT_FORCE_INLINE
// keeps such a helper inline on both, as the emulator's own helpers are. No CUDA header is
// needed, so host-only builds include this too.

#if defined(__CUDACC__)
#define SERVEKIT_HD __host__ __device__
#define SERVEKIT_FORCE_INLINE __forceinline__
#else
#define SERVEKIT_HD
#define SERVEKIT_FORCE_INLINE __attribute__((always_inline))
#endif
