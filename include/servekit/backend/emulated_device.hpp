// SPDX-License-Identifier: Apache-2.0
#pragma once
// The EmulatedDevice backend: Ops<Cuda> built by the host compiler. The kernels run under the
// simt emulator, the decoder's arrays live in DeviceStorage (device memory is host memory
// there), and no launch is waited for, so the step's copies, waits, graphs and launches are
// Cuda's, counted and testable without a GPU (tests/test_gpt2_device_storage.cpp,
// bench/decode_launches.cpp).
#include "servekit/backend/device_storage.hpp"
#include "servekit/backend/policy.hpp"
#include "servekit/backend/simt_ops.hpp"

#if defined(__CUDACC__)
#error \
    "servekit/backend/emulated_device.hpp is for the host compiler; under nvcc use backend/cuda.hpp"
#endif

namespace servekit::backend {

struct EmulatedDevice {
  using axis = Axis;
  static constexpr std::string_view name = "emulated-device";
};

template <>
struct Ops<EmulatedDevice> : SimtOps<false>, DeviceStorage {
  using Storage = DeviceStorage;
};

}  // namespace servekit::backend
