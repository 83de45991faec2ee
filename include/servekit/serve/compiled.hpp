// SPDX-License-Identifier: Apache-2.0
#pragma once
// The dispatch table: the compositions a program is built with, and the one place where a
// run-time choice becomes a Composition (types). The CLI, the server and `servekit bench` ask
// it; so may any program: dispatch_composition(spec, f) calls f with the compiled composition.
//
// Which compositions are compiled is a build option (cmake -DSERVEKIT_COMPOSITIONS=..., see
// cmake/compositions.cmake), which defines SERVEKIT_COMPILED_COMPOSITIONS, a list of names, in
// a generated header. Without it (a program built outside CMake), the two host compositions
// named at the #ifndef below.
#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "servekit/core/error.hpp"
#include "servekit/serve/composition.hpp"

// The default list, read by cmake/compositions.cmake between the two markers: every value of
// every field at least once, without the full product. The f32 entries keep what `generate`,
// `batch` and `serve` ran before they took composition flags; the contiguous f16 / bf16 / u8 /
// u8-group64 entries beside f32/contiguous/none let `servekit bench --compare weights=...` compare
// the formats alone; w8a8 with the int8 cache is the all-8-bit composition; the f16 paged-f16
// segmented one runs on each backend (--compare backend=).
// clang-format off
// servekit-default-compositions-begin
#define SERVEKIT_DEFAULT_COMPOSITIONS \
  "f32/contiguous/none/continuous/host", \
  "f32/contiguous/none/static/host", \
  "f32/contiguous/none/sequential/host", \
  "f32/contiguous/gathered/continuous/host", \
  "f32/contiguous/gathered/static/host", \
  "f32/contiguous/gathered/sequential/host", \
  "f32/paged16/gathered/continuous/host", \
  "f16/contiguous/none/continuous/host", \
  "bf16/contiguous/none/continuous/host", \
  "u8/contiguous/none/continuous/host", \
  "u8-group64/contiguous/none/continuous/host", \
  "u8-channel/contiguous-f16/loop/continuous/host", \
  "w8a8-channel/paged16-i8/none/continuous/host", \
  "f16/paged16-f16/segmented/continuous/host", \
  "f16/paged16-f16/segmented/continuous/emulated", \
  "f16/paged16-f16/segmented/continuous/cuda"
// servekit-default-compositions-end
// clang-format on

// A program built with CMake finds its list in a generated header (apps/servekit.cmake).
#if !defined(SERVEKIT_COMPILED_COMPOSITIONS) && __has_include(<servekit_compiled_compositions.h>)
#include <servekit_compiled_compositions.h>
#endif
#ifndef SERVEKIT_COMPILED_COMPOSITIONS
#define SERVEKIT_COMPILED_COMPOSITIONS \
  "f32/contiguous/none/continuous/host", "f32/paged16/gathered/continuous/host"
#endif

namespace servekit::serve {

inline constexpr std::string_view kCompiledNames[] = {SERVEKIT_COMPILED_COMPOSITIONS};
inline constexpr std::size_t kCompiledCount = std::size(kCompiledNames);

// The compiled list as Specs, checked by the compiler: a misspelt name stops the build here.
inline constexpr auto kCompiledSpecs = [] {
  std::array<Spec, kCompiledCount> out{};
  for (std::size_t i = 0; i < kCompiledCount; i++) {
    const Parsed p = parse_composition(kCompiledNames[i]);
    if (!p.ok())
      throw "SERVEKIT_COMPILED_COMPOSITIONS: a name does not parse (see composition.hpp)";
    out[i] = p.spec;
  }
  return out;
}();

// The I-th compiled composition.
template <std::size_t I>
using CompiledAt = Composition<kCompiledSpecs[I]>;

// Where spec is in the compiled list, if it is.
inline std::optional<std::size_t> compiled_index(const Spec& spec) {
  for (std::size_t i = 0; i < kCompiledCount; i++)
    if (kCompiledSpecs[i] == spec) return i;
  return std::nullopt;
}

// The compiled compositions, one per line (for --version and errors).
inline std::string compiled_list(std::string_view indent = "  ") {
  std::string s;
  for (const Spec& c : kCompiledSpecs) s += std::string(indent) + spec_name(c) + "\n";
  return s;
}

// The error for a composition that parses but was not compiled: what was, and how to add it.
[[noreturn]] inline void fail_not_compiled(const Spec& spec) {
  fail("the composition ", spec_name(spec), " is not compiled into this build. Compiled:\n",
       compiled_list(), "Add it with cmake -DSERVEKIT_COMPOSITIONS=\"default;", spec_name(spec),
       "\" (or =all for every one) and rebuild.");
}

// Parses a user's name; an error names the field at fault and what it accepts.
inline Spec spec_from_name(std::string_view name) {
  const Parsed p = parse_composition(name);
  if (!p.ok())
    fail("composition '", name, "': ",
         p.bad_field < 5 ? std::string("the ") + std::string(kFields[p.bad_field]) + " field" : "",
         p.bad_field < 5 ? " accepts " : "expected ", field_values(p.bad_field));
  return p.spec;
}

// Calls f(std::type_identity<CompiledAt<I>>{}) for the compiled composition equal to spec.
template <class F>
decltype(auto) dispatch_composition(const Spec& spec, F&& f) {
  const auto i = compiled_index(spec);
  if (!i) fail_not_compiled(spec);
  using R = decltype(f(std::type_identity<CompiledAt<0>>{}));
  return [&]<std::size_t... I>(std::index_sequence<I...>)->R {
    using Call = R (*)(F&);
    static constexpr Call table[] = {
        [](F& g) -> R { return g(std::type_identity<CompiledAt<I>>{}); }...};
    return table[*i](f);
  }
  (std::make_index_sequence<kCompiledCount>{});
}

}  // namespace servekit::serve
