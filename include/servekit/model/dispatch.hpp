// SPDX-License-Identifier: Apache-2.0
#pragma once
// The one place where a checkpoint's runtime config.json becomes compile-time dims. Every
// supported shape is listed here explicitly; anything else is an error that lists them.
#include <optional>
#include <string>
#include <type_traits>

#include "servekit/core/error.hpp"
#include "servekit/core/dims.hpp"
#include "servekit/model/hf_config.hpp"

namespace servekit {

template <class... Ds>
struct DimsList {};

// The shapes the CLI and examples are compiled for. SERVEKIT_COMPILED_DIMS_FOR_TESTS keeps only
// the two the tests run them with (cmake -DSERVEKIT_DIMS=tests, what scripts/test.sh asks; the
// sanitizer build of the CLI): the random GPT-2 124M and tiny-a.
#if defined(SERVEKIT_COMPILED_DIMS_FOR_TESTS)
using CompiledDims = DimsList<dims::Gpt2Small, dims::TinyA>;
#else
using CompiledDims = DimsList<dims::Gpt2Small, dims::Gpt2Medium, dims::Gpt2Large, dims::Gpt2XL,
                              dims::DistilGpt2, dims::TinyA, dims::TinyB>;
#endif

template <class D>
bool dims_match(const model::Gpt2HfConfig& c) {
  return c.n_layer == D::n_layer && c.n_head == D::n_head && c.n_embd == D::n_embd &&
         c.vocab_size == D::vocab && c.n_positions == D::n_positions;
}

template <class D>
std::string dims_string() {
  return detail::cat(D::name, " (n_layer ", D::n_layer, ", n_head ", D::n_head, ", n_embd ",
                     D::n_embd, ", vocab ", D::vocab, ", n_positions ", D::n_positions, ")");
}

template <class... Ds>
[[noreturn]] void fail_unsupported(const model::Gpt2HfConfig& c) {
  std::string list;
  ((list += "\n  " + dims_string<Ds>()), ...);
  fail("unsupported model shape: n_layer ", c.n_layer, ", n_head ", c.n_head, ", n_embd ", c.n_embd,
       ", vocab ", c.vocab_size, ", n_positions ", c.n_positions, ". Supported shapes:", list
#if defined(SERVEKIT_COMPILED_DIMS_FOR_TESTS)
       ,
       "\n(this build has the shapes the tests load only: configure with "
       "-DSERVEKIT_DIMS=all for every GPT-2 shape)"
#endif
  );
}

// Calls f(std::type_identity<D>{}) with the compiled D matching c; the result of f is returned
// by value (R, never a reference into this frame's optional).
template <class F, class... Ds,
          class R = decltype(std::declval<F&>()(std::type_identity<dims::Gpt2Small>{}))>
R dispatch_dims(const model::Gpt2HfConfig& c, F&& f, DimsList<Ds...>) {
  static_assert(!std::is_reference_v<R>, "dispatch_dims: f must return a value, not a reference");
  if constexpr (std::is_void_v<R>) {
    bool done = ((dims_match<Ds>(c) ? (f(std::type_identity<Ds>{}), true) : false) || ...);
    if (!done) fail_unsupported<Ds...>(c);
  } else {
    std::optional<R> r;
    ((dims_match<Ds>(c) ? (r.emplace(f(std::type_identity<Ds>{})), true) : false) || ...);
    if (!r) fail_unsupported<Ds...>(c);
    return std::move(*r);
  }
}

template <class F>
auto dispatch_dims(const model::Gpt2HfConfig& c, F&& f) {
  return dispatch_dims(c, std::forward<F>(f), CompiledDims{});
}

}  // namespace servekit
