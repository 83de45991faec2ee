// SPDX-License-Identifier: Apache-2.0
#pragma once
// KV-cache layout policies.
#include <concepts>
#include <string_view>

namespace servekit::kv {

// One slot per sequence holding max_len rows per layer: the padded past_key_values of HF.
struct Contiguous {
  static constexpr std::string_view name = "contiguous";
};

template <class K>
concept KvLayout = requires {
  { K::name } -> std::convertible_to<std::string_view>;
};

}  // namespace servekit::kv
