// SPDX-License-Identifier: Apache-2.0
#pragma once
// LoRA dispatch policies: how a batch whose rows use different adapters runs the low-rank
// path y += scale * (x A^T) B^T of each adapted linear. The base matmul is shared by every row
// either way; the policies differ in how the small per-adapter products are organised:
//
//   Loop       the course's loop: one pass over the whole batch per distinct adapter, keeping
//              the rows that use it (cost grows with the number of adapters in the batch)
//   Gathered   BGMV (punica): every row gathers its own adapter's A and B
//   Segmented  SGMV (punica, S-LoRA): rows grouped by adapter, one shrink (x A^T) and one
//              expand (v B^T) per group
#include <concepts>
#include <string_view>

namespace servekit::lora {

// Every LoRA dispatch policy says so (`using axis = lora::Axis`): see weights::Axis.
struct Axis {};

// No adapters: the linear layers run the base weights only.
struct None {
  using axis = Axis;
  static constexpr std::string_view name = "none";
};
struct Loop {
  using axis = Axis;
  static constexpr std::string_view name = "lora-loop";
};
struct Gathered {
  using axis = Axis;
  static constexpr std::string_view name = "lora-gathered";
};
struct Segmented {
  using axis = Axis;
  static constexpr std::string_view name = "lora-segmented";
};

template <class L>
concept LoraDispatch = requires {
  { L::name } -> std::convertible_to<std::string_view>;
  requires std::same_as<typename L::axis, Axis>;
};

template <class L>
inline constexpr bool enabled = !std::same_as<L, None>;

}  // namespace servekit::lora
