// SPDX-License-Identifier: Apache-2.0
// PEFT LoRA adapters (lora/adapter.hpp, model/merge_lora.hpp) against HF transformers + PEFT: three
// adapters of ranks 4, 8 and 16 (one rsLoRA, one on layer 0 only) on both tiny models, merged
// into the base weights, give PEFT's logits and greedy tokens to the base model's tolerance;
// unmerging gives the base weights back bit for bit; every malformed adapter is refused with an
// error naming the file and the field or tensor.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "servekit/lora/adapter.hpp"
#include "servekit/model/merge_lora.hpp"
#include "servekit/model/gpt2.hpp"
#include "support/hf_checks.hpp"
#include "support/safetensors_writer.hpp"

namespace sk = servekit;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {
constexpr float kTol = 1e-4f;  // as the base model: fp32 on both sides, summation order differs
using servekit::test::fixture_dir;

template <class D>
fs::path adapter_dir(const char* name) {
  return fixture_dir<D>() / "lora" / name;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

template <class D>
void check_merged_against_peft(const char* name) {
  INFO("adapter " << name);
  const auto ad = sk::lora::load_adapter<D>(adapter_dir<D>(name));
  auto t = sk::model::load_gpt2<D>(fixture_dir<D>());
  sk::lora::merge(t, ad);
  sk::Gpt2<sk::Config<D>> model(std::move(t));
  const auto ref = sk::test::load_reference(adapter_dir<D>(name));
  REQUIRE(ref.cases.size() == 4);
  for (const auto& c : ref.cases) {
    INFO("case " << c.name);
    auto cache = model.make_cache(1);
    sk::test::check_hf_case(model, cache, 0, c, ref.n_steps, kTol);
  }
}

}  // namespace

TEMPLATE_TEST_CASE("PEFT adapters load with PEFT's scale and shapes", "[lora]", sk::dims::TinyA,
                   sk::dims::TinyB) {
  using D = TestType;
  constexpr int C = D::n_embd;
  for (const char* name : {"r4", "r8", "r16"}) {
    INFO("adapter " << name);
    const auto ad = sk::lora::load_adapter<D>(adapter_dir<D>(name));
    std::ifstream in(adapter_dir<D>(name) / "reference.json");
    const auto ref = nlohmann::json::parse(in);
    CHECK(ad.name == name);
    CHECK(ad.scale == Approx(ref["scale"].get<double>()).epsilon(1e-6));
    REQUIRE(ad.layers.size() == static_cast<std::size_t>(D::n_layer));
    const auto* qkv = ad.find(0, sk::lora::Target::Attn);
    REQUIRE(qkv);
    CHECK(qkv->a.size() == static_cast<std::size_t>(ad.rank) * C);
    CHECK(qkv->b.size() == static_cast<std::size_t>(3 * C) * ad.rank);
  }
  const auto r8 = sk::lora::load_adapter<D>(adapter_dir<D>("r8"));
  CHECK(r8.rank == 8);
  CHECK(r8.find(0, sk::lora::Target::AttnProj));
  CHECK_FALSE(r8.find(1, sk::lora::Target::Attn));  // layers_to_transform = [0]
  CHECK_FALSE(r8.find(0, sk::lora::Target::Fc));
  const auto r16 = sk::lora::load_adapter<D>(adapter_dir<D>("r16"));
  CHECK(r16.rslora);
  CHECK(r16.scale == Approx(16.0 / 4.0));
  for (int l = 0; l < D::n_layer; l++)
    for (int t = 0; t < sk::lora::kTargets; t++)
      CHECK(r16.find(l, static_cast<sk::lora::Target>(t)));
}

TEMPLATE_TEST_CASE("a merged adapter gives PEFT's logits and greedy tokens", "[lora][hf]",
                   sk::dims::TinyA, sk::dims::TinyB) {
  for (const char* name : {"r4", "r8", "r16"}) check_merged_against_peft<TestType>(name);
}

TEMPLATE_TEST_CASE("unmerge gives the base weights back bit for bit", "[lora]", sk::dims::TinyA,
                   sk::dims::TinyB) {
  using D = TestType;
  const auto base = sk::model::load_gpt2<D>(fixture_dir<D>());
  auto t = base;
  const auto ad = sk::lora::load_adapter<D>(adapter_dir<D>("r16"));
  auto undo = sk::lora::merge(t, ad);
  CHECK(undo.saved.size() == static_cast<std::size_t>(4 * D::n_layer));
  CHECK_FALSE(same_bits(t.layers[0].fc_w, base.layers[0].fc_w));  // the merge changed it
  sk::lora::unmerge(t, std::move(undo));
  for (std::size_t l = 0; l < base.layers.size(); l++) {
    INFO("layer " << l);
    CHECK(same_bits(t.layers[l].attn_w, base.layers[l].attn_w));
    CHECK(same_bits(t.layers[l].attn_proj_w, base.layers[l].attn_proj_w));
    CHECK(same_bits(t.layers[l].fc_w, base.layers[l].fc_w));
    CHECK(same_bits(t.layers[l].mlp_proj_w, base.layers[l].mlp_proj_w));
  }
}

TEST_CASE("malformed adapters are refused with the file and field at fault", "[lora][errors]") {
  using D = sk::dims::TinyA;
  const fs::path good = adapter_dir<D>("r8");
  sk::testing::TempDir tmp;
  const nlohmann::json cfg = [&] {
    std::ifstream in(good / "adapter_config.json");
    return nlohmann::json::parse(in);
  }();
  const auto st = sk::io::SafetensorsFile::open(good / "adapter_model.safetensors");
  int n = 0;
  // A copy of the good adapter with its config edited and its tensors rewritten by `tensors`.
  auto variant = [&](auto edit_cfg, auto tensors) {
    const fs::path d = tmp.path() / ("a" + std::to_string(n++));
    fs::create_directories(d);
    nlohmann::json c = cfg;
    edit_cfg(c);
    sk::testing::write_text(d / "adapter_config.json", c.dump());
    sk::testing::SafetensorsWriter w;
    for (const auto& e : st.entries()) tensors(w, e.name, e.shape, sk::io::read_as_f32(e));
    w.write(d / "adapter_model.safetensors");
    return d;
  };
  auto same = [](sk::testing::SafetensorsWriter& w, const std::string& k, std::vector<int64_t> s,
                 const std::vector<float>& v) { w.add(k, s, v, sk::DType::F32); };
  auto keep = [](nlohmann::json&) {};
  auto refused = [&](const fs::path& d, const std::string& what) {
    INFO("expecting: " << what);
    REQUIRE_THROWS_WITH(sk::lora::load_adapter<D>(d), Contains(what));
  };

  refused(tmp.path() / "nowhere", "no adapter_config.json");
  {
    const fs::path d = variant(keep, same);
    fs::remove(d / "adapter_model.safetensors");
    refused(d, "no adapter_model.safetensors");
  }
  {
    const fs::path d = variant(keep, same);
    sk::testing::write_text(d / "adapter_config.json", "{\"r\": 8,");
    refused(d, "adapter_config.json: not valid JSON");
  }
  refused(variant([](auto& c) { c.erase("r"); }, same), "missing required field 'r'");
  refused(variant([](auto& c) { c["r"] = -3; }, same), "field 'r' is -3");
  refused(variant([](auto& c) { c["r"] = "8"; }, same), "not a positive integer");
  refused(variant([](auto& c) { c["lora_alpha"] = 0; }, same), "'lora_alpha' is 0");
  refused(variant([](auto& c) { c["peft_type"] = "IA3"; }, same), "'peft_type' is \"IA3\"");
  refused(variant([](auto& c) { c["use_dora"] = true; }, same), "DoRA");
  refused(variant([](auto& c) { c["bias"] = "all"; }, same), "field 'bias' is \"all\"");
  refused(variant([](auto& c) { c["modules_to_save"] = {"lm_head"}; }, same), "modules_to_save");
  refused(variant([](auto& c) { c["rank_pattern"] = {{"c_attn", 4}}; }, same), "rank_pattern");
  refused(variant(
              [](auto& c) {
                c["target_modules"] = {"c_attn", "q_proj"};
              },
              same),
          "target_modules entry \"q_proj\" names no GPT-2 linear");
  refused(variant([](auto& c) { c["target_modules"] = ".*attn.*"; }, same),
          "field 'target_modules' is \".*attn.*\"");
  // The tensors adapt attn.c_proj, which the config no longer lists.
  refused(variant([](auto& c) { c["target_modules"] = {"c_attn"}; }, same),
          "adapts attn.c_proj, which target_modules in adapter_config.json does not name");
  // Rank 8 in the config, but the caller allows 4 at most.
  REQUIRE_THROWS_WITH(sk::lora::load_adapter<D>(good, {.max_rank = 4}),
                      Contains("above the maximum rank 4"));
  // Config says r = 4, tensors are rank 8: a shape error naming the tensor.
  refused(variant([](auto& c) { c["r"] = 4; }, same),
          "h.0.attn.c_attn.lora_A.weight' has shape (8, 64), expected (4, 64)");
  // A base-model mismatch: an adapter made for a wider model.
  refused(variant(keep,
                  [](auto& w, const std::string& k, std::vector<int64_t> s, const auto& v) {
                    if (k.find("lora_A") != std::string::npos) s[1] = 32;
                    std::vector<float> x(s[0] * s[1], 0.1f);
                    w.add(k, s, k.find("lora_A") != std::string::npos ? x : v, sk::DType::F32);
                  }),
          "expected (8, 64)");
  refused(variant(keep,
                  [](auto& w, const std::string& k, std::vector<int64_t> s, const auto& v) {
                    if (k.find("c_proj.lora_B") == std::string::npos)
                      w.add(k, s, v, sk::DType::F32);
                  }),
          "layer 0 attn.c_proj has lora_A but no lora_B");
  refused(variant(keep,
                  [](auto& w, const std::string& k, std::vector<int64_t> s, const auto& v) {
                    std::string key = k;
                    if (key.find("h.0.attn.c_attn") != std::string::npos)
                      key.replace(key.find("h.0."), 4, "h.7.");
                    w.add(key, s, v, sk::DType::F32);
                  }),
          "is for layer 7; the base model has 2 layers");
  refused(variant(keep,
                  [](auto& w, const std::string& k, std::vector<int64_t> s, auto v) {
                    w.add(k, s, v, sk::DType::F32);
                    if (k.find("h.0.attn.c_attn.lora_A") != std::string::npos)
                      w.add("base_model.model.lm_head.lora_A.weight", s, v, sk::DType::F32);
                  }),
          "tensor 'base_model.model.lm_head.lora_A.weight' is not a LoRA A or B matrix");
  refused(variant(keep,
                  [](auto& w, const std::string& k, std::vector<int64_t> s, auto v) {
                    if (k.find("c_attn.lora_B") != std::string::npos) v[5] = NAN;
                    w.add(k, s, v, sk::DType::F32);
                  }),
          "has a non-finite value (nan) at flat index 5");
  refused(variant(keep, [](auto&, const std::string&, std::vector<int64_t>, const auto&) {}),
          "holds no LoRA matrices");
}
