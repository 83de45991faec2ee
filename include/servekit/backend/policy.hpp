// SPDX-License-Identifier: Apache-2.0
#pragma once
// Backend policies: where the kernels run.
#include <concepts>
#include <string_view>

namespace servekit::backend {

// Every backend says so (`using axis = backend::Axis`): see weights::Axis.
struct Axis {};

// Plain C++ + OpenMP on the CPU: the fast CPU path and the reference for the other backends.
struct Host {
  using axis = Axis;
  static constexpr std::string_view name = "host";
};

// The CUDA kernels (kernels/*.hpp) compiled by the host compiler and run on the CPU by the simt
// emulator: every CUDA thread a fiber. Slow; it exists to test the kernels without a GPU.
struct Emulated {
  using axis = Axis;
  static constexpr std::string_view name = "emulated";
};

// The same kernels compiled by nvcc and run on an NVIDIA GPU (sm_80 or later).
struct Cuda {
  using axis = Axis;
  static constexpr std::string_view name = "cuda";
};

template <class B>
concept Backend = requires {
  { B::name } -> std::convertible_to<std::string_view>;
  requires std::same_as<typename B::axis, Axis>;
};

}  // namespace servekit::backend
