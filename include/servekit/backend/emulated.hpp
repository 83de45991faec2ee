// SPDX-License-Identifier: Apache-2.0
#pragma once
// The Emulated backend: the CUDA kernels built by the host compiler and run by the simt
// emulator. Device memory is host memory, so the decoder's std::vector weights and scratch are
// used as they are (HostStorage); each launch completes before the next operation reads its
// output.
#include "servekit/backend/simt_ops.hpp"
#include "servekit/core/storage.hpp"

#if defined(__CUDACC__)
#error "servekit/backend/emulated.hpp is for the host compiler; under nvcc use backend/cuda.hpp"
#endif

namespace servekit::backend {

template <>
struct Ops<Emulated> : SimtOps<true>, HostStorage {
  using Storage = HostStorage;
};

}  // namespace servekit::backend
