// SPDX-License-Identifier: Apache-2.0
#pragma once
// Where a backend's kernels run, in words: the CPU (model and ISA), or the GPU's name.
#include <string>

#include "servekit/backend/policy.hpp"
#include "servekit/core/cpu_name.hpp"
#include "servekit/core/error.hpp"
#if defined(__CUDACC__)
#include "servekit/backend/cuda_device.hpp"
#endif

namespace servekit::cli {

template <class B>
std::string device_name() {
  if constexpr (std::is_same_v<B, backend::Emulated>) {
    return "the CUDA kernels emulated on " + cpu_name();
  } else if constexpr (std::is_same_v<B, backend::Cuda>) {
#if defined(__CUDACC__)
    return backend::cuda_device_summary();
#else
    return "CUDA";
#endif
  } else {
    return cpu_name();
  }
}

// Before a Cuda model touches the runtime: a machine without a usable GPU is a clear error.
template <class B>
void check_device() {
#if defined(__CUDACC__)
  if constexpr (std::is_same_v<B, backend::Cuda>)
    if (const std::string why = backend::cuda_device_missing(); !why.empty())
      fail("--backend cuda: no usable CUDA device on this machine (", why,
           "); use --backend host, or emulated to run the CUDA kernels on the CPU");
#endif
}

}  // namespace servekit::cli
