// SPDX-License-Identifier: Apache-2.0
#pragma once
// The backend a kernel test's twin runs on: the emulator's Ops when a host compiler builds the
// test, the GPU's when nvcc does (test_kernels_cuda). Either takes weights::DeviceMatrix and
// device memory (tests/device_mirror.hpp's on()); under the emulator both are host memory.
#include "device_backend.hpp"
#include "servekit/weights/device_matrix.hpp"

namespace device_test {

using DeviceOps = servekit::backend::Ops<Backend>;

template <class Fmt>
servekit::weights::DeviceMatrix<Fmt> upload(const servekit::weights::Matrix<Fmt>& m) {
  return servekit::weights::DeviceMatrix<Fmt>::upload(m);
}

}  // namespace device_test
