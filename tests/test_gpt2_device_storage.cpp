// SPDX-License-Identifier: Apache-2.0
// The device-storage decoder path (DeviceMatrix weights, DeviceVector scratch, device KV caches
// and block tables, uploads, the row gather kernel, the logits download) built by the host
// compiler: the emulator runs the kernels over simt::DeviceVector memory, which is host memory
// here, so the code the Cuda backend runs is checked without a GPU.
#include "servekit/backend/emulated_device.hpp"

using DeviceBackend = servekit::backend::EmulatedDevice;
#include "gpt2_device_checks.hpp"
