// SPDX-License-Identifier: Apache-2.0
// The serving invariants on backend::Cuda (test_invariants_device_storage: the same under the
// emulator).
#include "servekit/backend/cuda.hpp"

using DeviceBackend = servekit::backend::Cuda;
#include "device_invariants_checks.hpp"
