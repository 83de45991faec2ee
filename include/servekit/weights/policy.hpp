// SPDX-License-Identifier: Apache-2.0
#pragma once
// Weight-format policies: how the linear layers' matrices are stored.
#include <concepts>
#include <string_view>

namespace servekit::weights {

// Full-precision storage: the checkpoint's values as fp32, the format every other one is
// compared against.
struct F32 {
  static constexpr std::string_view name = "f32";
};

template <class W>
concept WeightFormat = requires {
  { W::name } -> std::convertible_to<std::string_view>;
};

}  // namespace servekit::weights
