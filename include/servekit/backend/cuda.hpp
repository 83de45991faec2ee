// SPDX-License-Identifier: Apache-2.0
#pragma once
// The Cuda backend: the same kernels and launchers as Emulated, compiled by nvcc. Every pointer
// given to these operations must be device memory: the decoder keeps its weights, scratch and
// KV cache in DeviceStorage. Launches are ordered on the default stream and not waited for;
// the decoder's logits download is the step's one synchronisation.
#include "servekit/backend/device_storage.hpp"
#include "servekit/backend/simt_ops.hpp"

#if !defined(__CUDACC__)
#error "servekit/backend/cuda.hpp needs nvcc; with a host compiler use backend/emulated.hpp"
#endif

namespace servekit::backend {

template <>
struct Ops<Cuda> : SimtOps<false>, DeviceStorage {
  using Storage = DeviceStorage;
};

}  // namespace servekit::backend
