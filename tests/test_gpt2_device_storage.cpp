// SPDX-License-Identifier: Apache-2.0
// The device-storage decoder path (DeviceMatrix weights, DeviceVector scratch, device KV caches
// and block tables, uploads, the row gather kernel, the logits download) built by the host
// compiler: the emulator runs the kernels over simt::DeviceVector memory, which is host memory
// here, so the code the Cuda backend runs is checked without a GPU.
#include "servekit/backend/device_storage.hpp"
#include "servekit/backend/simt_ops.hpp"

namespace servekit::backend {
// Ops<Cuda> run by the emulator: Cuda's storage instead of std::vector, and no wait after each
// launch (the emulator's launches are done when they return), so the step's copies and
// synchronisations are counted as Cuda's.
struct EmulatedDeviceStorage {
  using axis = Axis;
  static constexpr std::string_view name = "emulated-device-storage";
};
template <>
struct Ops<EmulatedDeviceStorage> : SimtOps<false>, DeviceStorage {
  using Storage = DeviceStorage;
};
}  // namespace servekit::backend

using DeviceBackend = servekit::backend::EmulatedDeviceStorage;
#include "gpt2_device_checks.hpp"
