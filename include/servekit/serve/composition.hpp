// SPDX-License-Identifier: Apache-2.0
#pragma once
// A composition as the programs name it at run time: weights / kv / lora / scheduler / backend,
// e.g. "f16/paged16-f16/lora-segmented/continuous/emulated". The dims are not part of it: they
// come from the checkpoint's config.json (model/dispatch.hpp).
//
// One parser turns such a name into a Spec (plain values) both at compile time, for the list of
// compositions a program is built with (serve/compiled.hpp), and at run time, for what a user
// asked for; a Spec becomes types here and nowhere else. Each field takes the policy's own name
// ("lora-gathered", "u8zp-channel") or a short spelling ("gathered", "u8-channel").
#include <array>
#include <string>
#include <string_view>

#include "servekit/backend/policy.hpp"
#include "servekit/kv/policy.hpp"
#include "servekit/lora/policy.hpp"
#include "servekit/model/config.hpp"
#include "servekit/serve/sched/continuous.hpp"
#include "servekit/serve/sched/sequential.hpp"
#include "servekit/serve/sched/static_batch.hpp"
#include "servekit/weights/policy.hpp"

namespace servekit::serve {

// What a composition name parses into. weights: an index into kWeightsKinds (group: its size);
// kv_block 0 is the contiguous cache; kv_dtype an index into kKvDtypes.
struct Spec {
  int weights = 0, group = 0, kv_block = 0, lora = 0, scheduler = 0, backend = 0;
  int kv_dtype = 0;
  friend constexpr bool operator==(const Spec&, const Spec&) = default;
};

// The fields of a name, in order, and the values each accepts (first: the canonical spelling).
inline constexpr std::array<std::string_view, 5> kFields = {"weights", "kv", "lora", "scheduler",
                                                            "backend"};
inline constexpr std::array<std::string_view, 4> kWeightsKinds = {"f32", "f16", "bf16", "u8zp-"};
// The cache's element: a layout name's suffix ("" for f32).
inline constexpr std::array<std::string_view, 3> kKvDtypes = {"", "-f16", "-i8"};
inline constexpr std::array<std::string_view, 4> kLoraNames = {"none", "lora-loop", "lora-gathered",
                                                               "lora-segmented"};
inline constexpr std::array<std::string_view, 3> kSchedulerNames = {"continuous", "static",
                                                                    "sequential"};
inline constexpr std::array<std::string_view, 3> kBackendNames = {"host", "emulated", "cuda"};
// u8 granularities after "u8zp-" (or "u8-"): index 3 "tensor", 4 "channel", then "groupG";
// W8A8 after "w8a8-": 6 "channel", 7 "groupG".
inline constexpr int kU8Tensor = 3, kU8Channel = 4, kU8Group = 5, kW8Channel = 6, kW8Group = 7;

// What the parser says of a name: ok, or which field is wrong (an index into kFields; 5: the
// number of fields).
struct Parsed {
  Spec spec;
  int bad_field = -1;
  constexpr bool ok() const { return bad_field < 0; }
};

namespace spec_detail {

constexpr bool starts(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}

// A positive decimal number filling all of s, else -1.
constexpr int number(std::string_view s) {
  if (s.empty() || s.size() > 6) return -1;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v > 0 ? v : -1;
}

template <std::size_t N>
constexpr int index_of(const std::array<std::string_view, N>& names, std::string_view s,
                       std::string_view short_prefix = "") {
  for (std::size_t i = 0; i < N; i++)
    if (names[i] == s || (!short_prefix.empty() && starts(names[i], short_prefix) &&
                          names[i].substr(short_prefix.size()) == s))
      return static_cast<int>(i);
  return -1;
}

// f32 f16 bf16, u8 / u8zp (per tensor), u8-channel, u8-group64 (and their "u8zp-" forms);
// w8a8 / w8a8-channel (w8a8_int8, SGLang's spelling), w8a8-group64.
constexpr bool parse_weights(std::string_view s, Spec& out) {
  if (int i = index_of(kWeightsKinds, s); i >= 0 && i < 3) return out.weights = i, true;
  if (s == "w8a8" || s == "w8a8_int8" || s == "w8a8-channel") return out.weights = kW8Channel, true;
  if (starts(s, "w8a8-group") && number(s.substr(10)) > 0)
    return out.weights = kW8Group, out.group = number(s.substr(10)), true;
  if (s == "u8" || s == "u8zp") return out.weights = kU8Tensor, true;
  std::string_view g = starts(s, "u8zp-") ? s.substr(5) : starts(s, "u8-") ? s.substr(3) : "";
  if (g == "tensor") return out.weights = kU8Tensor, true;
  if (g == "channel") return out.weights = kU8Channel, true;
  if (starts(g, "group") && number(g.substr(5)) > 0)
    return out.weights = kU8Group, out.group = number(g.substr(5)), true;
  return false;
}

// contiguous, pagedN, each with "-f16" for a half cache or "-i8" for an int8 one.
constexpr bool parse_kv(std::string_view s, Spec& out) {
  out.kv_dtype = 0;
  for (int d = 1; d < static_cast<int>(kKvDtypes.size()); d++)
    if (s.size() > kKvDtypes[d].size() &&
        s.substr(s.size() - kKvDtypes[d].size()) == kKvDtypes[d]) {
      out.kv_dtype = d;
      s = s.substr(0, s.size() - kKvDtypes[d].size());
      break;
    }
  if (s == "contiguous") return out.kv_block = 0, true;
  return starts(s, "paged") && (out.kv_block = number(s.substr(5))) > 0;
}

}  // namespace spec_detail

// "w/kv/lora/scheduler/backend" -> Spec. constexpr: the compiled list is parsed by the compiler.
constexpr Parsed parse_composition(std::string_view name) {
  Parsed p;
  std::array<std::string_view, 5> f{};
  std::size_t n = 0, start = 0;
  for (std::size_t i = 0; i <= name.size(); i++)
    if (i == name.size() || name[i] == '/') {
      if (n == f.size()) return p.bad_field = 5, p;
      f[n++] = name.substr(start, i - start);
      start = i + 1;
    }
  if (n != f.size()) return p.bad_field = 5, p;
  Spec& s = p.spec;
  if (!spec_detail::parse_weights(f[0], s)) return p.bad_field = 0, p;
  if (!spec_detail::parse_kv(f[1], s)) return p.bad_field = 1, p;
  if ((s.lora = spec_detail::index_of(kLoraNames, f[2], "lora-")) < 0) return p.bad_field = 2, p;
  if ((s.scheduler = spec_detail::index_of(kSchedulerNames, f[3])) < 0) return p.bad_field = 3, p;
  if ((s.backend = spec_detail::index_of(kBackendNames, f[4])) < 0) return p.bad_field = 4, p;
  return p;
}

// The types a Spec names.
template <int Kind, int G>
struct WeightsOf;
template <int G>
struct WeightsOf<0, G> : std::type_identity<weights::F32> {};
template <int G>
struct WeightsOf<1, G> : std::type_identity<weights::F16> {};
template <int G>
struct WeightsOf<2, G> : std::type_identity<weights::BF16> {};
template <int G>
struct WeightsOf<kU8Tensor, G> : std::type_identity<weights::U8ZeroPoint<weights::PerTensor>> {};
template <int G>
struct WeightsOf<kU8Channel, G> : std::type_identity<weights::U8ZeroPoint<weights::PerChannel>> {};
template <int G>
struct WeightsOf<kU8Group, G> : std::type_identity<weights::U8ZeroPoint<weights::Group<G>>> {};
template <int G>
struct WeightsOf<kW8Channel, G> : std::type_identity<weights::W8A8<weights::PerChannel>> {};
template <int G>
struct WeightsOf<kW8Group, G> : std::type_identity<weights::W8A8<weights::Group<G>>> {};

template <int Dtype>
using KvElemOf = std::tuple_element_t<Dtype, std::tuple<kv::F32, kv::F16, kv::I8>>;
template <int Block, int Dtype>
using KvOf = std::conditional_t<Block == 0, kv::BasicContiguous<KvElemOf<Dtype>>,
                                kv::Paged<(Block > 0 ? Block : 1), KvElemOf<Dtype>>>;

template <int I>
using LoraOf =
    std::tuple_element_t<I, std::tuple<lora::None, lora::Loop, lora::Gathered, lora::Segmented>>;
template <int I>
using SchedulerOf =
    std::tuple_element_t<I, std::tuple<sched::Continuous, sched::Static, sched::Sequential<>>>;
template <int I>
using BackendOf =
    std::tuple_element_t<I, std::tuple<backend::Host, backend::Emulated, backend::Cuda>>;

// One composition as types: a Config for any dims, and the engine's scheduler.
template <Spec S>
struct Composition {
  static constexpr Spec spec = S;
  using Weights = typename WeightsOf<S.weights, S.group>::type;
  using Kv = KvOf<S.kv_block, S.kv_dtype>;
  using Lora = LoraOf<S.lora>;
  using Backend = BackendOf<S.backend>;
  using Scheduler = SchedulerOf<S.scheduler>;
  template <dims::ModelDims D>
  using Config = servekit::Config<D, Weights, Kv, Lora, Backend>;

  static std::string name() {
    std::string s;
    for (std::string_view part :
         {Weights::name, Kv::name, Lora::name, Scheduler::name, Backend::name}) {
      if (!s.empty()) s += '/';
      s += part;
    }
    return s;
  }
};

// A Spec's canonical name at run time (the same string Composition<S>::name() gives).
inline std::string spec_name(const Spec& s) {
  std::string w = s.weights < kU8Tensor     ? std::string(kWeightsKinds[s.weights])
                  : s.weights == kU8Tensor  ? "u8zp-tensor"
                  : s.weights == kU8Channel ? "u8zp-channel"
                  : s.weights == kU8Group   ? "u8zp-group" + std::to_string(s.group)
                  : s.weights == kW8Channel ? "w8a8-channel"
                                            : "w8a8-group" + std::to_string(s.group);
  std::string k = s.kv_block == 0 ? "contiguous" : "paged" + std::to_string(s.kv_block);
  k += kKvDtypes[s.kv_dtype];
  return w + "/" + k + "/" + std::string(kLoraNames[s.lora]) + "/" +
         std::string(kSchedulerNames[s.scheduler]) + "/" + std::string(kBackendNames[s.backend]);
}

// What each field accepts, for error messages and --help.
inline std::string field_values(int field) {
  switch (field) {
    case 0:
      return "f32, f16, bf16, u8 (per tensor), u8-channel, u8-groupG (e.g. u8-group64), w8a8 "
             "(int8 weights per channel and activations per token), w8a8-groupG";
    case 1:
      return "contiguous, pagedN (e.g. paged16), each with -f16 for a half cache or -i8 for an "
             "int8 one";
    case 2:
      return "none, loop, gathered, segmented";
    case 3:
      return "continuous, static, sequential";
    case 4:
      return "host, emulated, cuda";
    default:
      return "five fields: weights/kv/lora/scheduler/backend";
  }
}

}  // namespace servekit::serve
