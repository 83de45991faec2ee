// SPDX-License-Identifier: Apache-2.0
#pragma once
// Weight-format policies: how the linear layers' matrices are stored. Each is a tag with a
// printable name; weights::Matrix<Fmt> holds the data and the linear kernels read it.
#include <array>
#include <concepts>
#include <cstddef>
#include <string_view>

namespace servekit::weights {

// Every weight format says so (`using axis = weights::Axis`), so that a policy of another axis
// passed in its place (Config<Gpt2Small, kv::Paged<16>>) fails at the user's line, naming this
// concept, instead of deep inside the loader.
struct Axis {};

template <class W>
concept WeightFormat = requires {
  { W::name } -> std::convertible_to<std::string_view>;
  requires std::same_as<typename W::axis, Axis>;
};

// Full-precision storage: the checkpoint's values as fp32, the format every other one is
// compared against.
struct F32 {
  using axis = Axis;
  static constexpr std::string_view name = "f32";
};

// IEEE half: 10 mantissa bits, range +-65504. Round to nearest even at load.
struct F16 {
  using axis = Axis;
  static constexpr std::string_view name = "f16";
};

// bfloat16: fp32's exponent with 7 mantissa bits. Round to nearest even at load.
struct BF16 {
  using axis = Axis;
  static constexpr std::string_view name = "bf16";
};

namespace detail {
// A name built at compile time ("group64", "u8zp-channel"), kept in static storage.
template <std::size_t N>
struct FixedName {
  std::array<char, N> s{};
  constexpr std::string_view view() const { return {s.data(), N}; }
};

constexpr std::size_t n_digits(int v) {
  std::size_t n = 1;
  while (v >= 10) v /= 10, n++;
  return n;
}

template <std::size_t N>
constexpr FixedName<N> join(std::string_view a, std::string_view b) {
  FixedName<N> f;
  std::size_t i = 0;
  for (char c : a) f.s[i++] = c;
  for (char c : b) f.s[i++] = c;
  return f;
}

template <int G>
constexpr auto group_name() {
  FixedName<5 + n_digits(G)> f;
  std::size_t i = 0;
  for (char c : std::string_view("group")) f.s[i++] = c;
  for (std::size_t d = n_digits(G), v = G; d > 0; d--, v /= 10) f.s[i + d - 1] = char('0' + v % 10);
  return f;
}
}  // namespace detail

// Quantization granularity of U8ZeroPoint: which weights share one (scale, min) pair. For a
// (K, N) = (in, out) matrix:
//   PerTensor:  all K * N weights (the course's choice)
//   PerChannel: one output column, its K weights
//   Group<G>:   G consecutive input rows of one column (K must be a multiple of G)
// rows(K) is how many input rows a group spans, per_column whether columns have their own.
struct PerTensor {
  static constexpr std::string_view name = "tensor";
  static constexpr bool per_column = false;
  static constexpr int rows(int K) { return K; }
};
struct PerChannel {
  static constexpr std::string_view name = "channel";
  static constexpr bool per_column = true;
  static constexpr int rows(int K) { return K; }
};
template <int G>
struct Group {
  static_assert(G > 0, "servekit: weights::Group<G> needs G > 0");
  static constexpr int size = G;
  static constexpr auto name_storage = detail::group_name<G>();
  static constexpr std::string_view name = name_storage.view();
  static constexpr bool per_column = true;
  static constexpr int rows(int) { return G; }
};

template <class G>
concept Granularity = requires(int K) {
  { G::name } -> std::convertible_to<std::string_view>;
  { G::per_column } -> std::convertible_to<bool>;
  { G::rows(K) } -> std::convertible_to<int>;
};

// Zero-point uint8 quantization, the course's formula per group of weights:
//   scale = (max - min) / 255, zero_point = min
//   q = uint8(clamp((w - min) / scale, 0, 255))   (truncated toward zero, as a cast)
//   w' = q * scale + min
// One byte per weight plus two floats per group.
template <Granularity G>
struct U8ZeroPoint {
  using axis = Axis;
  using Gran = G;
  static constexpr auto name_storage = detail::join<5 + G::name.size()>("u8zp-", G::name);
  static constexpr std::string_view name = name_storage.view();
};

// W8A8: int8 weights and int8 activations, integer products summed in int32. The weights are
// symmetric int8 per group (s_w = max |w| / 127, codes round(w / s_w) in -127..127;
// core/symmetric_int8.hpp); each row of x is quantised the same way right before the linear
// (dynamic, per token: s_x = max |x_row| / 127). Integer sums are exact whatever their order, so
// the floats enter once per group and row:
//   y[m][n] = s_x[m] * sum_g s_w[g][n] * isum_g[m][n],   isum_g = sum_{k in g} xq[m][k] wq[k][n]
// One byte per weight plus a float per group (and an int32 column sum per group, for kernels
// that take activations unsigned). No smoothing: without calibration data the activations'
// outlier channels are unknown at load (see docs/04_quantization.md). A group spans a multiple
// of 4 input rows (the integer kernels take k four at a time).
template <Granularity G>
struct W8A8 {
  using axis = Axis;
  using Gran = G;
  static constexpr auto name_storage = detail::join<5 + G::name.size()>("w8a8-", G::name);
  static constexpr std::string_view name = name_storage.view();
};

}  // namespace servekit::weights
