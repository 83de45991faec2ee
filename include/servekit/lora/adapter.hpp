// SPDX-License-Identifier: Apache-2.0
#pragma once
// A PEFT LoRA adapter for GPT-2, as `PeftModel.save_pretrained` writes it: a folder with
// adapter_config.json and adapter_model.safetensors. Each adapted linear (in -> out) gets
//   y = x W + b + scale * (x A^T) B^T,   A: (r, in), B: (out, r),
// scale = lora_alpha / r, or lora_alpha / sqrt(r) with rsLoRA. The matrices are kept as PEFT
// stores them (nn.Linear layout, whatever fan_in_fan_out says: that flag only tells PEFT the
// base layer is a Conv1D, which GPT-2's always are).
//
// Everything an adapter could get wrong is refused here, naming the file and the field or
// tensor: a missing file, bad JSON, an unknown or unsupported option (DoRA, bias training,
// per-module rank or alpha patterns, modules_to_save), an unknown target module, a tensor for
// a layer or module the base model does not have, a shape that does not fit the base model, a
// rank above the caller's limit, a non-finite value.
#include <array>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "servekit/core/error.hpp"
#include "servekit/core/json_brief.hpp"
#include "servekit/core/json_file.hpp"
#include "servekit/core/regular_file.hpp"
#include "servekit/io/safetensors.hpp"
#include "servekit/core/dims.hpp"

namespace servekit::lora {

// The four linears of a GPT-2 block, in HF's module names.
enum class Target { Attn = 0, AttnProj = 1, Fc = 2, MlpProj = 3 };
inline constexpr int kTargets = 4;
inline constexpr std::array<std::string_view, kTargets> kTargetNames = {
    "attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};

// (in, out) features of a target in a model C wide.
constexpr std::array<int, 2> target_shape(Target t, int C) {
  switch (t) {
    case Target::Attn:
      return {C, 3 * C};
    case Target::AttnProj:
      return {C, C};
    case Target::Fc:
      return {C, 4 * C};
    case Target::MlpProj:
      return {4 * C, C};
  }
  return {0, 0};
}

struct LoraPair {
  int rank = 0, in = 0, out = 0;
  std::vector<float> a;  // (rank, in)
  std::vector<float> b;  // (out, rank)
};

struct Adapter {
  std::string name;  // the folder's name unless the caller gives one
  std::filesystem::path dir;
  int rank = 0;
  float alpha = 0, scale = 0;
  bool rslora = false;
  std::array<bool, kTargets> targets{};  // which modules the config names
  std::vector<std::array<std::optional<LoraPair>, kTargets>> layers;  // (n_layer)

  const LoraPair* find(int layer, Target t) const {
    const auto& p = layers[layer][static_cast<int>(t)];
    return p ? &*p : nullptr;
  }
  // fp32 bytes of all A and B matrices.
  std::size_t bytes() const {
    std::size_t n = 0;
    for (const auto& l : layers)
      for (const auto& p : l)
        if (p) n += (p->a.size() + p->b.size()) * sizeof(float);
    return n;
  }
};

struct AdapterLimits {
  int max_rank = 256;
};

namespace detail {

inline nlohmann::json read_json_object(const std::filesystem::path& p) {
  auto j = read_json_file(p);
  if (!j.is_object()) fail(p.string(), ": a JSON ", j.type_name(), ", not an object");
  return j;
}

// Which of the four modules a PEFT target_modules entry names. PEFT matches an entry against
// the end of a module's dotted name, so "c_proj" names both projections.
inline std::array<bool, kTargets> match_target(const std::string& entry) {
  std::array<bool, kTargets> hit{};
  for (int t = 0; t < kTargets; t++) {
    const std::string full = "transformer.h.0." + std::string(kTargetNames[t]);
    hit[t] = full == entry || (full.size() > entry.size() && full.ends_with(entry) &&
                               full[full.size() - entry.size() - 1] == '.');
  }
  return hit;
}

// An option that must be absent, null, false, empty or equal to `ok` (a string).
inline void require_unset(const nlohmann::json& j, const char* field, const std::string& file,
                          const char* why, const char* ok = nullptr) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return;
  if (it->is_boolean() && !it->get<bool>()) return;
  if ((it->is_object() || it->is_array()) && it->empty()) return;
  if (ok && it->is_string() && it->get<std::string>() == ok) return;
  fail(file, ": field '", field, "' is ", json_brief(*it), ": ", why);
}

}  // namespace detail

// Reads the adapter in `dir` for a base model of dims D.
template <dims::ModelDims D>
Adapter load_adapter(const std::filesystem::path& dir, AdapterLimits lim = {}) {
  constexpr int L = D::n_layer, C = D::n_embd;
  Adapter ad;
  ad.dir = dir;
  ad.name =
      dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
  const auto cfg_path = dir / "adapter_config.json";
  const std::string cfg_file = cfg_path.string();
  if (!std::filesystem::exists(cfg_path))
    fail("adapter ", dir.string(),
         ": no adapter_config.json (a PEFT adapter folder has "
         "adapter_config.json and adapter_model.safetensors)");
  const auto j = detail::read_json_object(cfg_path);

  if (auto it = j.find("peft_type"); it != j.end() && !it->is_null() && *it != "LORA")
    fail(cfg_file, ": field 'peft_type' is ", json_brief(*it), ", not \"LORA\"");
  auto r_it = j.find("r");
  if (r_it == j.end()) fail(cfg_file, ": missing required field 'r'");
  if (!r_it->is_number_integer() || r_it->get<int64_t>() < 1)
    fail(cfg_file, ": field 'r' is ", json_brief(*r_it), ", not a positive integer");
  if (r_it->get<int64_t>() > lim.max_rank)
    fail(cfg_file, ": field 'r' is ", r_it->get<int64_t>(), ", above the maximum rank ",
         lim.max_rank);
  ad.rank = static_cast<int>(r_it->get<int64_t>());
  auto a_it = j.find("lora_alpha");
  if (a_it == j.end()) {
    ad.alpha = 8;  // PEFT's default
  } else if (!a_it->is_number() || !std::isfinite(a_it->get<double>()) ||
             a_it->get<double>() <= 0) {
    fail(cfg_file, ": field 'lora_alpha' is ", json_brief(*a_it), ", not a positive number");
  } else {
    ad.alpha = a_it->get<float>();
  }
  if (auto it = j.find("use_rslora"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean())
      fail(cfg_file, ": field 'use_rslora' is ", json_brief(*it), ", not a boolean");
    ad.rslora = it->get<bool>();
  }
  ad.scale = ad.rslora ? ad.alpha / std::sqrt(static_cast<float>(ad.rank)) : ad.alpha / ad.rank;

  detail::require_unset(j, "bias", cfg_file, "servekit serves LoRA without trained biases", "none");
  detail::require_unset(j, "use_dora", cfg_file, "DoRA adapters are not supported");
  detail::require_unset(j, "modules_to_save", cfg_file,
                        "adapters that replace whole modules are not supported");
  detail::require_unset(j, "rank_pattern", cfg_file, "per-module ranks are not supported");
  detail::require_unset(j, "alpha_pattern", cfg_file, "per-module alphas are not supported");
  detail::require_unset(j, "lora_bias", cfg_file, "LoRA biases are not supported");

  auto t_it = j.find("target_modules");
  if (t_it == j.end() || t_it->is_null()) fail(cfg_file, ": missing field 'target_modules'");
  if (!t_it->is_array() || t_it->empty())
    fail(cfg_file, ": field 'target_modules' is ", json_brief(*t_it),
         "; servekit needs a non-empty list of module names");
  for (const auto& e : *t_it) {
    if (!e.is_string())
      fail(cfg_file, ": target_modules entry ", json_brief(e), " is not a string");
    const auto hit = detail::match_target(e.get<std::string>());
    bool any = false;
    for (int t = 0; t < kTargets; t++) any |= hit[t], ad.targets[t] = ad.targets[t] || hit[t];
    if (!any)
      fail(cfg_file, ": target_modules entry ", json_brief(e),
           " names no GPT-2 linear (c_attn, attn.c_proj, c_fc, mlp.c_proj)");
  }

  const auto st_path = dir / "adapter_model.safetensors";
  if (!std::filesystem::exists(st_path))
    fail("adapter ", dir.string(), ": no adapter_model.safetensors");
  const auto st = io::SafetensorsFile::open(st_path);
  const std::string st_file = st_path.string();
  ad.layers.resize(L);
  // base_model.model.transformer.h.N.<module>.lora_A.weight (some savers omit "transformer.")
  static const std::regex key(
      R"(base_model\.model\.(?:transformer\.)?h\.(\d+)\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.lora_([AB])\.weight)");
  std::vector<std::array<std::array<const io::TensorEntry*, 2>, kTargets>> seen(L);
  for (const auto& e : st.entries()) {
    std::smatch m;
    if (!std::regex_match(e.name, m, key))
      fail(st_file, ": tensor '", e.name, "' is not a LoRA A or B matrix of a GPT-2 linear");
    const long layer = m[1].str().size() > 6 ? L : std::stol(m[1].str());
    if (layer >= L)
      fail(st_file, ": tensor '", e.name, "' is for layer ", m[1].str(), "; the base model has ", L,
           " layers");
    int t = 0;
    while (kTargetNames[t] != m[2].str()) t++;
    if (!ad.targets[t])
      fail(st_file, ": tensor '", e.name, "' adapts ", kTargetNames[t],
           ", which target_modules in adapter_config.json does not name");
    seen[layer][t][m[3].str() == "A" ? 0 : 1] = &e;
  }
  int pairs = 0;
  for (int l = 0; l < L; l++)
    for (int t = 0; t < kTargets; t++) {
      const auto [A, B] = seen[l][t];
      if (!A && !B) continue;
      const std::string where = "layer " + std::to_string(l) + " " + std::string(kTargetNames[t]);
      if (!A || !B)
        fail(st_file, ": ", where, " has lora_", A ? "A" : "B", " but no lora_", A ? "B" : "A");
      const auto [in, out] = target_shape(static_cast<Target>(t), C);
      const std::vector<int64_t> want_a{ad.rank, in}, want_b{out, ad.rank};
      if (A->shape != want_a)
        fail(st_file, ": tensor '", A->name, "' has shape ", io::shape_str(A->shape), ", expected ",
             io::shape_str(want_a), " (r = ", ad.rank, ", ", D::name, " has n_embd = ", C, ")");
      if (B->shape != want_b)
        fail(st_file, ": tensor '", B->name, "' has shape ", io::shape_str(B->shape), ", expected ",
             io::shape_str(want_b), " (r = ", ad.rank, ", ", D::name, " has n_embd = ", C, ")");
      LoraPair p{ad.rank, in, out, io::read_as_f32(*A), io::read_as_f32(*B)};
      for (const auto* v : {&p.a, &p.b})
        for (std::size_t i = 0; i < v->size(); i++)
          if (!std::isfinite((*v)[i]))
            fail(st_file, ": tensor '", v == &p.a ? A->name : B->name, "' has a non-finite value (",
                 (*v)[i], ") at flat index ", i);
      ad.layers[l][t] = std::move(p);
      pairs++;
    }
  if (pairs == 0) fail(st_file, ": holds no LoRA matrices");
  return ad;
}

}  // namespace servekit::lora
