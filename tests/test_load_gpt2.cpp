// SPDX-License-Identifier: Apache-2.0
// The GPT-2 loader on synthetic checkpoints in every spelling HF writes (with and without the
// "transformer." prefix, tied lm_head present or absent, causal-mask buffers, F32/F16/BF16,
// sharded), every way a checkpoint can disagree with the compiled dims, the seeded random
// initialisation, and the committed fixtures.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <omp.h>

#include <catch2/catch.hpp>

#include "servekit/model/load_gpt2.hpp"
#include "support/safetensors_writer.hpp"

using namespace servekit;
using Catch::Contains;
using model::Gpt2Tensors;
using testing::Gpt2Layout;
using testing::TempDir;

namespace {

using D = dims::Tiny<2, 2, 8, 11, 6>;  // C 8, V 11, P 6: every shape distinct

// Every tensor filled with distinct random values, so a swapped or transposed tensor shows.
Gpt2Tensors random_distinct(uint32_t seed) {
  Gpt2Tensors t = model::random_gpt2<D>(seed);
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (const auto& [name, st] : testing::gpt2_named_tensors(t, true))
    for (float& x : const_cast<std::vector<float>&>(*st.second)) x = d(g);
  return t;
}

// What the loader must return for `src` stored as `dt`: the values rounded through dt.
std::vector<float> through(const std::vector<float>& v, DType dt) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    out[i] = dt == DType::F16    ? half_to_float(float_to_half(v[i]))
             : dt == DType::BF16 ? bf16_to_float(float_to_bf16(v[i]))
                                 : v[i];
  return out;
}

void require_equal(const Gpt2Tensors& got, const Gpt2Tensors& src, DType dt) {
  REQUIRE(got.layers.size() == src.layers.size());
  const auto g = testing::gpt2_named_tensors(got, true), s = testing::gpt2_named_tensors(src, true);
  REQUIRE(g.size() == s.size());
  for (std::size_t k = 0; k < g.size(); ++k) {
    INFO(g[k].first);
    REQUIRE(*g[k].second.second == through(*s[k].second.second, dt));
  }
}

}  // namespace

TEST_CASE("load_gpt2 reads every layout HF writes", "[load_gpt2]") {
  const bool prefix = GENERATE(true, false);
  const bool lm_head = GENERATE(true, false);
  const bool mask_buffers = GENERATE(true, false);
  const DType dt = GENERATE(DType::F32, DType::F16, DType::BF16);
  INFO("prefix " << prefix << " lm_head " << lm_head << " mask_buffers " << mask_buffers << " "
                 << dt);
  TempDir tmp;
  const Gpt2Tensors src = random_distinct(7);
  testing::write_gpt2_checkpoint(tmp.path(), src, {prefix, lm_head, mask_buffers, dt});

  const Gpt2Tensors got = model::load_gpt2<D>(tmp.path());
  require_equal(got, src, dt);
  CHECK(got.config.n_layer == 2);
  CHECK(got.config.vocab_size == 11);
  CHECK(got.num_params() == src.num_params());

  const Gpt2Tensors any = model::load_gpt2_any(tmp.path());
  require_equal(any, src, dt);
}

TEST_CASE("load_gpt2 reads a sharded checkpoint", "[load_gpt2]") {
  TempDir tmp;
  const Gpt2Tensors src = random_distinct(8);
  testing::write_text(tmp / "config.json", testing::gpt2_config_json(src.config).dump());
  testing::SafetensorsWriter a, b;
  nlohmann::json index = {{"metadata", {{"total_size", 0}}},
                          {"weight_map", nlohmann::json::object()}};
  std::size_t k = 0;
  for (const auto& [name, st] : testing::gpt2_named_tensors(src, true)) {
    auto& w = (k++ % 2) ? b : a;
    w.add(name, st.first, *st.second);
    index["weight_map"][name] =
        (&w == &a) ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  a.write(tmp / "model-00001-of-00002.safetensors");
  b.write(tmp / "model-00002-of-00002.safetensors");
  testing::write_text(tmp / "model.safetensors.index.json", index.dump());

  SECTION("loads") {
    require_equal(model::load_gpt2<D>(tmp.path()), src, DType::F32);
  }
  SECTION("index naming the wrong shard") {
    index["weight_map"]["transformer.wte.weight"] = "model-00002-of-00002.safetensors";
    testing::write_text(tmp / "model.safetensors.index.json", index.dump());
    REQUIRE_THROWS_WITH(model::load_gpt2<D>(tmp.path()),
                        Contains("model.safetensors.index.json") &&
                            Contains("'transformer.wte.weight'") &&
                            Contains("model-00002-of-00002.safetensors"));
  }
  SECTION("index naming a missing shard") {
    index["weight_map"]["transformer.wte.weight"] = "model-00003-of-00002.safetensors";
    testing::write_text(tmp / "model.safetensors.index.json", index.dump());
    REQUIRE_THROWS_WITH(model::load_gpt2<D>(tmp.path()),
                        Contains("model-00003-of-00002.safetensors") && Contains("cannot open"));
  }
}

TEST_CASE("config.json problems name the field and file", "[load_gpt2][bad]") {
  TempDir tmp;
  const Gpt2Tensors src = random_distinct(9);
  testing::write_gpt2_checkpoint(tmp.path(), src, {});
  nlohmann::json cfg = testing::gpt2_config_json(src.config);
  auto load_with = [&](const nlohmann::json& c) {
    testing::write_text(tmp / "config.json", c.dump());
    return model::load_gpt2<D>(tmp.path());
  };

  SECTION("missing config.json") {
    std::filesystem::remove(tmp / "config.json");
    REQUIRE_THROWS_WITH(model::load_gpt2<D>(tmp.path()),
                        Contains("config.json") && Contains("cannot open"));
  }
  SECTION("not JSON") {
    testing::write_text(tmp / "config.json", "{\"n_layer\": 2,");
    REQUIRE_THROWS_WITH(model::load_gpt2<D>(tmp.path()),
                        Contains("config.json") && Contains("not valid JSON"));
  }
  SECTION("missing required field") {
    const char* field = GENERATE("n_layer", "n_head", "n_embd", "vocab_size", "n_positions");
    cfg.erase(field);
    REQUIRE_THROWS_WITH(
        load_with(cfg),
        Contains("config.json") && Contains(std::string("missing required field '") + field + "'"));
  }
  SECTION("field of the wrong type") {
    cfg["n_head"] = "2";
    REQUIRE_THROWS_WITH(load_with(cfg),
                        Contains("config.json") && Contains("'n_head'") && Contains("\"2\""));
  }
  SECTION("unsupported activation") {
    cfg["activation_function"] = "relu";
    REQUIRE_THROWS_WITH(load_with(cfg), Contains("config.json") &&
                                            Contains("'activation_function'") &&
                                            Contains("\"relu\""));
  }
  SECTION("gelu_pytorch_tanh is the same activation") {
    cfg["activation_function"] = "gelu_pytorch_tanh";
    CHECK(load_with(cfg).config.activation_function == "gelu_pytorch_tanh");
  }
  SECTION("n_embd not a multiple of n_head") {
    cfg["n_head"] = 3;
    REQUIRE_THROWS_WITH(load_with(cfg),
                        Contains("config.json") && Contains("n_embd 8") && Contains("n_head 3"));
  }
  SECTION("another MLP width") {
    cfg["n_inner"] = 24;
    REQUIRE_THROWS_WITH(load_with(cfg), Contains("'n_inner' is 24") && Contains("32"));
  }
  SECTION("other attention scaling") {
    cfg["scale_attn_by_inverse_layer_idx"] = true;
    REQUIRE_THROWS_WITH(load_with(cfg), Contains("'scale_attn_by_inverse_layer_idx' is true"));
  }
  SECTION("another model type") {
    cfg["model_type"] = "llama";
    REQUIRE_THROWS_WITH(load_with(cfg), Contains("'model_type' is \"llama\""));
  }
  SECTION("layer_norm_epsilon is read") {
    cfg["layer_norm_epsilon"] = 1e-6;
    CHECK(load_with(cfg).config.layer_norm_epsilon == 1e-6f);
  }
}

TEST_CASE("a config that disagrees with the compiled dims names both values", "[load_gpt2][bad]") {
  TempDir tmp;
  const Gpt2Tensors src = random_distinct(10);
  testing::write_gpt2_checkpoint(tmp.path(), src, {});
  nlohmann::json cfg = testing::gpt2_config_json(src.config);
  auto [field, value, compiled] = GENERATE(table<const char*, int, int>({{"n_layer", 3, 2},
                                                                         {"n_head", 4, 2},
                                                                         {"n_embd", 16, 8},
                                                                         {"vocab_size", 12, 11},
                                                                         {"n_positions", 7, 6}}));
  cfg[field] = value;
  testing::write_text(tmp / "config.json", cfg.dump());
  REQUIRE_THROWS_WITH(model::load_gpt2<D>(tmp.path()),
                      Contains("config.json") &&
                          Contains(std::string(field) + " is " + std::to_string(value)) &&
                          Contains("dims tiny was compiled with " + std::to_string(compiled)));
}

TEST_CASE("checkpoint problems name the tensor and file", "[load_gpt2][bad]") {
  TempDir tmp;
  const Gpt2Tensors src = random_distinct(11);
  testing::write_text(tmp / "config.json", testing::gpt2_config_json(src.config).dump());
  const auto path = tmp / "model.safetensors";
  auto load = [&](const testing::SafetensorsWriter& w) {
    w.write(path);
    return model::load_gpt2<D>(tmp.path());
  };

  SECTION("no weights file") {
    REQUIRE_THROWS_WITH(model::load_gpt2<D>(tmp.path()),
                        Contains(tmp.path().string()) && Contains("no checkpoint"));
  }
  SECTION("missing tensor") {
    auto w = testing::gpt2_writer(src, {});
    w.header().erase("transformer.h.1.mlp.c_fc.bias");
    REQUIRE_THROWS_WITH(
        load(w), Contains("model.safetensors") && Contains("missing tensor 'h.1.mlp.c_fc.bias'"));
  }
  SECTION("unexpected tensor") {
    auto w = testing::gpt2_writer(src, {});
    const std::vector<float> v(4, 1.0f);
    w.add("transformer.h.0.attn.rotary.inv_freq", {4}, v);
    REQUIRE_THROWS_WITH(load(w), Contains("model.safetensors") &&
                                     Contains("unexpected tensor "
                                              "'transformer.h.0.attn.rotary.inv_freq'"));
  }
  SECTION("mask buffer of a layer that does not exist") {
    auto w = testing::gpt2_writer(src, {});
    const std::vector<float> v(1, 1.0f);
    w.add("h.2.attn.bias", {1}, v);
    REQUIRE_THROWS_WITH(load(w), Contains("unexpected tensor 'h.2.attn.bias'"));
  }
  SECTION("the same tensor with and without the prefix") {
    auto w = testing::gpt2_writer(src, {});
    w.add("wte.weight", {11, 8}, src.wte);
    REQUIRE_THROWS_WITH(
        load(w), Contains("'wte.weight' appears twice") && Contains("'transformer.wte.weight'"));
  }
  SECTION("shape disagrees with the dims") {
    auto w = testing::gpt2_writer(src, {});
    w.header()["transformer.h.0.attn.c_attn.weight"]["shape"] = {24, 8};  // transposed
    REQUIRE_THROWS_WITH(load(w), Contains("model.safetensors") &&
                                     Contains("'transformer.h.0.attn.c_attn.weight'") &&
                                     Contains("has shape (24, 8)") &&
                                     Contains("dims tiny expects (8, 24)"));
  }
  SECTION("shape disagrees with the file's own config (load_gpt2_any)") {
    auto w = testing::gpt2_writer(src, {});
    w.header()["transformer.ln_f.bias"]["shape"] = {2, 4};
    w.write(path);
    REQUIRE_THROWS_WITH(model::load_gpt2_any(tmp.path()),
                        Contains("'transformer.ln_f.bias' has shape (2, 4)") &&
                            Contains("config.json expects (8,)"));
  }
  SECTION("a dtype that is not a float") {
    auto w = testing::gpt2_writer(src, {});
    w.header()["transformer.ln_f.bias"]["dtype"] = "I32";
    REQUIRE_THROWS_WITH(load(w), Contains("model.safetensors") &&
                                     Contains("'transformer.ln_f.bias'") && Contains("dtype I32"));
  }
  SECTION("lm_head that differs from wte") {
    auto w = testing::gpt2_writer(src, {});
    std::vector<float> head = src.wte;
    head[3 * 8 + 5] += 1.0f;
    w.add("lm_head.weight", {11, 8}, head);
    REQUIRE_THROWS_WITH(load(w), Contains("model.safetensors") &&
                                     Contains("'lm_head.weight' differs from "
                                              "'transformer.wte.weight' at [3, 5]") &&
                                     Contains("ties"));
  }
  SECTION("a NaN or inf weight is refused with the tensor's name and index") {
    for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
      Gpt2Tensors t = src;
      t.layers[1].fc_w[2 * 32 + 7] = bad;  // (C, 4C) = (8, 32): element [2, 7]
      auto w = testing::gpt2_writer(t, {});
      REQUIRE_THROWS_WITH(load(w), Contains("model.safetensors") &&
                                       Contains("'transformer.h.1.mlp.c_fc.weight'") &&
                                       Contains("non-finite") && Contains("[2, 7]"));
    }
    Gpt2Tensors t = src;
    t.ln_f_b[5] = std::nanf("");
    REQUIRE_THROWS_WITH(load(testing::gpt2_writer(t, {})),
                        Contains("'transformer.ln_f.bias'") && Contains("at [5]"));
  }
  SECTION("lm_head of the wrong shape") {
    auto w = testing::gpt2_writer(src, {});
    const std::vector<float> head(12 * 8, 0.0f);
    w.add("lm_head.weight", {12, 8}, head);
    REQUIRE_THROWS_WITH(
        load(w), Contains("'lm_head.weight' has shape (12, 8)") && Contains("expects (11, 8)"));
  }
}

TEST_CASE("random_gpt2 follows HF's init and is seeded", "[random_gpt2]") {
  using R = dims::Tiny<4, 4, 128, 1000, 64>;
  const Gpt2Tensors a = model::random_gpt2<R>(1);
  const int L = R::n_layer;

  // Sample mean and standard deviation within 6 standard errors of N(0, s): the estimate of
  // the mean has error s / sqrt(n), that of the standard deviation about s / sqrt(2n).
  auto check_normal = [](const std::vector<float>& v, double s) {
    double sum = 0, sq = 0;
    for (float x : v) sum += x, sq += double(x) * x;
    const double n = double(v.size()), mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
    CHECK(std::abs(mean) < 6 * s / std::sqrt(n));
    CHECK(std::abs(sd - s) < 6 * s / std::sqrt(2 * n));
  };
  check_normal(a.wte, 0.02);
  check_normal(a.wpe, 0.02);
  for (const auto& l : a.layers) {
    check_normal(l.attn_w, 0.02);
    check_normal(l.fc_w, 0.02);
    check_normal(l.attn_proj_w, 0.02 / std::sqrt(2.0 * L));
    check_normal(l.mlp_proj_w, 0.02 / std::sqrt(2.0 * L));
    for (float x : l.ln_1_w) REQUIRE(x == 1.0f);
    for (float x : l.ln_2_w) REQUIRE(x == 1.0f);
    for (const auto* b : {&l.ln_1_b, &l.ln_2_b, &l.attn_b, &l.attn_proj_b, &l.fc_b, &l.mlp_proj_b})
      for (float x : *b) REQUIRE(x == 0.0f);
  }
  for (float x : a.ln_f_w) REQUIRE(x == 1.0f);
  for (float x : a.ln_f_b) REQUIRE(x == 0.0f);
  // Layers are independent draws, not copies.
  CHECK(a.layers[0].attn_w != a.layers[1].attn_w);

  // The same seed gives the same weights whatever the thread count; another seed does not.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Gpt2Tensors one = model::random_gpt2<R>(1);
  omp_set_num_threads(3);
  const Gpt2Tensors three = model::random_gpt2<R>(1);
  omp_set_num_threads(threads);
  CHECK(one.wte == a.wte);
  CHECK(three.wte == a.wte);
  CHECK(three.layers[3].mlp_proj_w == a.layers[3].mlp_proj_w);
  CHECK(model::random_gpt2<R>(2).wte != a.wte);
}

TEST_CASE("the committed fixtures load", "[load_gpt2][fixtures]") {
  const std::filesystem::path fixtures = SERVEKIT_FIXTURES;
  SECTION("tiny-a: float32, 'transformer.' prefix, lm_head omitted") {
    const auto dir = fixtures / "tiny-a";
    const auto st = io::SafetensorsFile::open(dir / "model.safetensors");
    const Gpt2Tensors t = model::load_gpt2<dims::TinyA>(dir);
    CHECK(t.layers.size() == 2);
    CHECK(t.wte.size() == 512 * 64);
    CHECK(st.find("lm_head.weight") == nullptr);
    // Spot check: the loaded values are the file's bytes.
    const auto& e = st.at("transformer.h.1.mlp.c_proj.weight");
    REQUIRE(e.dtype == DType::F32);
    REQUIRE(e.shape == std::vector<int64_t>{256, 64});
    std::vector<float> raw(256 * 64);
    io::read_bytes(e, std::as_writable_bytes(std::span(raw)));
    CHECK(t.layers[1].mlp_proj_w == raw);
  }
  SECTION("tiny-b: bf16, no prefix, explicit lm_head, mask buffers") {
    const auto dir = fixtures / "tiny-b";
    const auto st = io::SafetensorsFile::open(dir / "model.safetensors");
    const Gpt2Tensors t = model::load_gpt2<dims::TinyB>(dir);
    CHECK(t.layers.size() == 3);
    CHECK(t.wte.size() == 1000 * 96);
    REQUIRE(st.find("lm_head.weight") != nullptr);
    REQUIRE(st.find("h.0.attn.bias") != nullptr);
    const auto& e = st.at("h.2.attn.c_attn.weight");
    REQUIRE(e.dtype == DType::BF16);
    REQUIRE(e.shape == std::vector<int64_t>{96, 288});
    const std::vector<std::byte> raw = io::read_bytes(e);
    for (std::size_t i = 0; i < t.layers[2].attn_w.size(); ++i) {
      uint16_t b;
      std::memcpy(&b, raw.data() + 2 * i, 2);
      REQUIRE(t.layers[2].attn_w[i] == bf16_to_float(bf16_t{b}));
    }
    // A tiny-b checkpoint is not a tiny-a one.
    REQUIRE_THROWS_WITH(model::load_gpt2<dims::TinyA>(dir),
                        Contains("n_layer is 3 but dims tiny-a was compiled with 2"));
  }
}
