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

template <class B>
concept Backend = requires {
  { B::name } -> std::convertible_to<std::string_view>;
};

}  // namespace servekit::backend
