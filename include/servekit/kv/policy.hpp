// SPDX-License-Identifier: Apache-2.0
#pragma once
// KV-cache layout policies: how a sequence's keys and values are laid out in memory, and in
// which element type. Every policy has a printable name, e.g. "contiguous", "paged16-f16".
#include <array>
#include <cstdint>
#include <concepts>
#include <string_view>
#include <type_traits>

#include "servekit/core/dtype.hpp"

namespace servekit::kv {

// Cache element types. Attention always computes in fp32; an f16 cache halves the memory per
// token and converts on read.
struct F32 {
  using type = float;
  static constexpr std::string_view name = "f32";
};
struct F16 {
  using type = half_t;
  static constexpr std::string_view name = "f16";
};

// int8 with a float scale per token and head (absmax / 127, rounded to nearest even): a
// quarter of f32's bytes and about half of f16's (the scales add 4 bytes per 64 features). The
// kernels fold the scales in: q . k_t * scale_k(t), and p_t * scale_v(t) before the sum of
// the values (kernels/host/attention_rows.hpp). A row's codes depend on that row alone, so a
// request's tokens still do not depend on what shares its steps.
struct I8 {
  using type = int8_t;
  static constexpr std::string_view name = "i8";
};

template <class E>
concept CacheElem = requires {
  typename E::type;
  { E::name } -> std::convertible_to<std::string_view>;
};

namespace detail {
// "contiguous" / "paged16" plus "-f16" for a non-default element: a compile-time string, so a
// policy's name is a string_view like every other policy's.
template <int BlockTokens, class E>
struct LayoutName {
  static constexpr auto chars = [] {
    constexpr std::string_view base = BlockTokens == 0 ? "contiguous" : "paged";
    constexpr std::string_view suffix = std::is_same_v<E, F32>   ? ""
                                        : std::is_same_v<E, F16> ? "-f16"
                                                                 : "-i8";
    std::array<char, 32> s{};
    std::size_t n = 0;
    for (char c : base) s[n++] = c;
    if (BlockTokens > 0) {
      char d[12];
      int k = 0;
      for (int v = BlockTokens; v > 0; v /= 10) d[k++] = static_cast<char>('0' + v % 10);
      while (k > 0) s[n++] = d[--k];
    }
    for (char c : suffix) s[n++] = c;
    return std::pair{s, n};
  }();
  static constexpr std::string_view value{chars.first.data(), chars.second};
};
}  // namespace detail

// Every cache layout says so (`using axis = kv::Axis`): see weights::Axis.
struct Axis {};

// One slot per sequence holding max_len rows per layer: the padded past_key_values of HF.
template <CacheElem E>
struct BasicContiguous {
  using axis = Axis;
  using Elem = E;
  static constexpr std::string_view name = detail::LayoutName<0, E>::value;
};
using Contiguous = BasicContiguous<F32>;
using ContiguousF16 = BasicContiguous<F16>;
using ContiguousI8 = BasicContiguous<I8>;

// A pool of fixed-size blocks of BlockTokens rows; each sequence owns a block table and grows
// one block at a time, so at most BlockTokens - 1 rows per sequence are reserved but unused.
template <int BlockTokens, CacheElem E = F32>
struct Paged {
  static_assert(BlockTokens > 0, "servekit: kv::Paged<BlockTokens> needs BlockTokens > 0");
  using axis = Axis;
  using Elem = E;
  static constexpr int block_tokens = BlockTokens;
  static constexpr std::string_view name = detail::LayoutName<BlockTokens, E>::value;
};
template <int BlockTokens>
using PagedF16 = Paged<BlockTokens, F16>;
template <int BlockTokens>
using PagedI8 = Paged<BlockTokens, I8>;

template <class K>
concept KvLayout = requires {
  { K::name } -> std::convertible_to<std::string_view>;
  requires std::same_as<typename K::axis, Axis>;
};

template <class K>
inline constexpr bool is_paged = false;
template <int BT, class E>
inline constexpr bool is_paged<Paged<BT, E>> = true;

}  // namespace servekit::kv
