// SPDX-License-Identifier: Apache-2.0
#pragma once
// Whether this process can use a CUDA device, asked once before anything else touches the
// runtime. A program built for the Cuda backend that starts on a machine without a GPU (or
// without the NVIDIA driver) says so in one line and exits with kNoCudaDeviceExit, a status of
// its own that a script can tell from a failure (scripts/check_gpu_bundle.sh relies on it).
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

namespace servekit::backend {

// sysexits.h's EX_UNAVAILABLE: "a service is unavailable".
inline constexpr int kNoCudaDeviceExit = 69;

// "" when a device is there; otherwise why not, in the runtime's words.
inline std::string cuda_device_missing() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // the error is reported here, not left for the next call
    return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  }
  return n == 0 ? "the runtime sees 0 devices" : "";
}

// The first device's name, compute capability and memory, for reports.
inline std::string cuda_device_summary() {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "unknown device";
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %.1f GiB)", p.name, p.major, p.minor,
                static_cast<double>(p.totalGlobalMem) / (1 << 30));
  return buf;
}

}  // namespace servekit::backend
