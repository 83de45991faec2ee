// SPDX-License-Identifier: Apache-2.0
#pragma once
// The Cuda backend: the same kernels and launchers as Emulated, compiled by nvcc. Every pointer
// given to these operations must be device memory; launches are ordered on the default stream
// and not waited for.
#include "servekit/backend/simt_ops.hpp"

#if !defined(__CUDACC__)
#error "servekit/backend/cuda.hpp needs nvcc; with a host compiler use backend/emulated.hpp"
#endif

namespace servekit::backend {

template <>
struct Ops<Cuda> : SimtOps<false> {};

}  // namespace servekit::backend
