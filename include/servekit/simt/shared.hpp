// SPDX-License-Identifier: Apache-2.0
#pragma once
// Dynamic shared memory (the third launch parameter), typed. On the GPU it is the one
// `extern __shared__` array; on the host, a per-OS-thread buffer sized by the launch, filled
// with 0xff bytes so that reading it before writing it gives NaNs, not lucky zeros.
#include "servekit/simt/platform.hpp"

#if defined(SERVEKIT_SIMT_HOST)
#include "servekit/simt/block_runner.hpp"
#endif

namespace servekit::simt {

template <class T>
__device__ SERVEKIT_SIMT_INLINE T* dynamic_smem() {
#if defined(SERVEKIT_SIMT_DEVICE)
  extern __shared__ __align__(16) unsigned char servekit_simt_dynamic_smem[];
  return reinterpret_cast<T*>(servekit_simt_dynamic_smem);
#else
  return reinterpret_cast<T*>(detail::g_worker->dynamic_smem);
#endif
}

}  // namespace servekit::simt
