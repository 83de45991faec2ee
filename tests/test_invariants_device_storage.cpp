// SPDX-License-Identifier: Apache-2.0
// The serving invariants with device storage, run by the emulator (test_invariants_cuda: the
// same on a GPU).
#include "servekit/backend/emulated_device.hpp"

using DeviceBackend = servekit::backend::EmulatedDevice;
#include "device_invariants_checks.hpp"
