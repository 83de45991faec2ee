// SPDX-License-Identifier: Apache-2.0
#pragma once
// Model dimensions as compile-time policies. Every shape in the decoder is derived from one of
// these, so a checkpoint is checked against them at load and kernels can specialise on them.
#include <concepts>
#include <string_view>

namespace servekit::dims {

// n_layer, n_head, n_embd (d_model), vocab, n_positions: the five numbers of a GPT-2 config.
template <int Layers, int Heads, int Embd, int Vocab, int Positions>
struct Dims {
  static_assert(Layers > 0 && Heads > 0 && Embd > 0 && Vocab > 0 && Positions > 0);
  static_assert(Embd % Heads == 0, "n_embd must be a multiple of n_head");
  static constexpr int n_layer = Layers;
  static constexpr int n_head = Heads;
  static constexpr int n_embd = Embd;
  static constexpr int vocab = Vocab;
  static constexpr int n_positions = Positions;
  static constexpr int head_dim = Embd / Heads;
  static constexpr int n_inner = 4 * Embd;  // GPT-2's MLP width
};

// clang-format off
struct Gpt2Small  : Dims<12, 12,  768, 50257, 1024> { static constexpr std::string_view name = "gpt2"; };
struct Gpt2Medium : Dims<24, 16, 1024, 50257, 1024> { static constexpr std::string_view name = "gpt2-medium"; };
struct Gpt2Large  : Dims<36, 20, 1280, 50257, 1024> { static constexpr std::string_view name = "gpt2-large"; };
struct Gpt2XL     : Dims<48, 25, 1600, 50257, 1024> { static constexpr std::string_view name = "gpt2-xl"; };
// DistilGPT2 (distilbert/distilgpt2): GPT-2 small's widths with 6 layers.
struct DistilGpt2 : Dims< 6, 12,  768, 50257, 1024> { static constexpr std::string_view name = "distilgpt2"; };
// The committed test checkpoints (tests/fixtures/tiny-a, tiny-b).
struct TinyA      : Dims< 2,  4,   64,   512,  128> { static constexpr std::string_view name = "tiny-a"; };
struct TinyB      : Dims< 3,  3,   96,  1000,   96> { static constexpr std::string_view name = "tiny-b"; };
// clang-format on

template <int L, int H, int C, int V, int P>
struct Tiny : Dims<L, H, C, V, P> {
  static constexpr std::string_view name = "tiny";
};

template <class D>
concept ModelDims = requires {
  { D::n_layer } -> std::convertible_to<int>;
  { D::n_head } -> std::convertible_to<int>;
  { D::n_embd } -> std::convertible_to<int>;
  { D::vocab } -> std::convertible_to<int>;
  { D::n_positions } -> std::convertible_to<int>;
  { D::head_dim } -> std::convertible_to<int>;
  { D::name } -> std::convertible_to<std::string_view>;
};

}  // namespace servekit::dims
