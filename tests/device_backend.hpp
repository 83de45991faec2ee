// SPDX-License-Identifier: Apache-2.0
#pragma once
// The backend a device test's twin runs on: the emulator when a host compiler builds the test,
// the GPU when nvcc does (the *_cuda programs of tests/cuda.cmake). Under the emulator device
// memory is host memory; the test's source is the same.
#if defined(__CUDACC__)
#include "servekit/backend/cuda.hpp"
#else
#include "servekit/backend/emulated.hpp"
#endif

namespace device_test {

#if defined(__CUDACC__)
using Backend = servekit::backend::Cuda;
#else
using Backend = servekit::backend::Emulated;
#endif

}  // namespace device_test
