// SPDX-License-Identifier: Apache-2.0
#pragma once
// LoRA dispatch policies: how a batch whose sequences use different adapters runs the
// low-rank path.
#include <concepts>
#include <string_view>

namespace servekit::lora {

// No adapters: the linear layers run the base weights only.
struct None {
  static constexpr std::string_view name = "none";
};

template <class L>
concept LoraDispatch = requires {
  { L::name } -> std::convertible_to<std::string_view>;
};

}  // namespace servekit::lora
