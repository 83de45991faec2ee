// SPDX-License-Identifier: Apache-2.0
// The whole tiny GPT-2 on the Cuda backend, on a GPU: weights, scratch and KV caches in device
// memory. Built by nvcc (sm_80, sm_90) whenever nvcc is found; registered as a test (label
// `cuda`) only when a GPU was present at configure time.
#include "servekit/backend/cuda.hpp"

using DeviceBackend = servekit::backend::Cuda;
#include "gpt2_device_checks.hpp"
