// SPDX-License-Identifier: Apache-2.0
#pragma once
// Backend policies: where the kernels run.
#include <concepts>
#include <string_view>

namespace servekit::backend {

// Plain C++ + OpenMP on the CPU: the fast CPU path and the reference for the other backends.
struct Host {
  static constexpr std::string_view name = "host";
};

// The CUDA kernels (kernels/*.hpp) compiled by the host compiler and run on the CPU by the simt
// emulator: every CUDA thread a fiber. Slow; it exists to test the kernels without a GPU.
struct Emulated {
  static constexpr std::string_view name = "emulated";
};

// The same kernels compiled by nvcc and run on an NVIDIA GPU (sm_80 or later).
struct Cuda {
  static constexpr std::string_view name = "cuda";
};

template <class B>
concept Backend = requires {
  { B::name } -> std::convertible_to<std::string_view>;
};

}  // namespace servekit::backend
