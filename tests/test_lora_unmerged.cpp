// SPDX-License-Identifier: Apache-2.0
// Unmerged LoRA on the host under each dispatch policy (lora::Loop, Gathered, Segmented):
// every PEFT fixture adapter gives HF + PEFT's logits through its slot; one ragged step mixing
// the base model and three adapters gives each row its own reference; and the engine, serving
// random mixes of 1 to 32 adapters (ranks 1..16, different targets) and base-model requests in
// shared steps, gives every request the tokens it gets alone with its adapter.
#include <catch2/catch.hpp>

#include <map>
#include <random>

#include "engine_support.hpp"
#include "servekit/lora/adapter.hpp"
#include "servekit/lora/random_adapter.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/engine.hpp"
#include "support/hf_checks.hpp"

namespace sk = servekit;
namespace sched = sk::serve::sched;
using sk::model::Logits;
using sk::model::SeqStep;
using sk::test::fixture_dir;
using namespace sk::test::engine;

namespace {
constexpr float kTol = 1e-4f;
using D = sk::dims::TinyA;
template <class Policy, class Kv = sk::kv::Paged<16>>
using Lora = sk::Gpt2<sk::Config<D, sk::weights::F32, Kv, Policy>>;

const char* const kFixtures[] = {"r4", "r8", "r16"};

// A random adapter: rank 1..16, a random non-empty subset of the four linears, random layers.
sk::lora::Adapter random_adapter(const std::string& name, std::mt19937_64& rng) {
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  sk::lora::RandomAdapterSpec spec{.name = name, .rank = uni(1, 16)};
  spec.alpha = static_cast<float>(uni(1, 32));
  spec.stddev = 0.07f;
  const int mask = uni(1, 15);
  for (int t = 0; t < sk::lora::kTargets; t++) spec.targets[t] = mask >> t & 1;
  spec.layer_share = 0.75;
  return sk::lora::random_adapter<D>(spec, rng);
}

// The three fixtures in slots 0..2, then random adapters up to n in all.
template <class Model>
std::vector<std::string> add_adapters(Model& m, int n, uint64_t seed) {
  std::vector<std::string> names;
  for (const char* f : kFixtures) {
    CHECK(m.add_adapter(sk::lora::load_adapter<D>(fixture_dir<D>() / "lora" / f)) ==
          static_cast<int>(names.size()));
    names.push_back(f);
  }
  std::mt19937_64 rng(seed);
  while (static_cast<int>(names.size()) < n) {
    names.push_back("random" + std::to_string(names.size()));
    m.add_adapter(random_adapter(names.back(), rng));
  }
  return names;
}

// Each request run alone (one at a time) with its adapter, top-2 logprobs to see near-ties:
// generate() takes no adapter name, so the engine with one slot is the oracle here.
template <class Model>
std::vector<sk::serve::Result> alone_with_adapters(Model& model,
                                                   std::vector<sk::serve::Request> rs) {
  sk::serve::Engine<Model, sched::Sequential<sched::KvCache>> one(
      model, tokenizer(), {.max_batch = 1, .prefix_caching = false});
  for (auto& r : rs) r.top_logprobs = 2;
  return one.run_all(std::move(rs));
}

}  // namespace

TEMPLATE_TEST_CASE("unmerged adapters give HF + PEFT's logits under every dispatch policy",
                   "[lora][hf]", sk::lora::Loop, sk::lora::Gathered, sk::lora::Segmented) {
  auto model = Lora<TestType, sk::kv::Contiguous>::load(fixture_dir<D>());
  add_adapters(model, 3, 0);
  for (int slot = 0; slot < 3; slot++) {
    INFO("adapter " << kFixtures[slot]);
    const auto ref = sk::test::load_reference(fixture_dir<D>() / "lora" / kFixtures[slot]);
    for (const auto& c : ref.cases) {
      INFO("case " << c.name);
      auto cache = model.make_cache(1);
      sk::test::check_hf_case(model, cache, 0, c, ref.n_steps, kTol, slot);
    }
  }
  // Slot -1 (and no adapters at all) is still the base model.
  const auto base = sk::test::load_reference(fixture_dir<D>());
  auto cache = model.make_cache(1);
  sk::test::check_hf_case(model, cache, 0, base.cases[2], base.n_steps, kTol, -1);
}

TEMPLATE_TEST_CASE("one ragged step mixing the base model and three adapters", "[lora][hf]",
                   sk::lora::Loop, sk::lora::Gathered, sk::lora::Segmented) {
  auto model = Lora<TestType>::load(fixture_dir<D>());
  add_adapters(model, 3, 0);
  constexpr int V = D::vocab;
  // Sequence i runs adapter i - 1 (sequence 0: none) on the fixture case i.
  std::vector<sk::test::Reference> refs{sk::test::load_reference(fixture_dir<D>())};
  for (const char* f : kFixtures)
    refs.push_back(sk::test::load_reference(fixture_dir<D>() / "lora" / f));
  std::vector<int32_t> tokens, adapters;
  std::vector<SeqStep> seqs;
  std::vector<const sk::test::RefCase*> cases;
  for (int i = 0; i < 4; i++) {
    // Base reference cases are all 9; adapter ones are random_len1/7/50 and course0.
    const auto& c = i == 0 ? refs[0].cases[2] : refs[i].cases[i % 4];
    cases.push_back(&c);
    seqs.push_back({i, 0, static_cast<int32_t>(c.prompt_ids.size())});
    tokens.insert(tokens.end(), c.prompt_ids.begin(), c.prompt_ids.end());
    adapters.push_back(i - 1);
  }
  auto cache = model.make_cache(4);
  std::vector<float> logits;
  model.forward(cache, {tokens, seqs, Logits::All, adapters}, logits);
  int r = 0;
  for (int i = 0; i < 4; i++) {
    INFO("sequence " << i << " (adapter slot " << i - 1 << ")");
    const int T = static_cast<int>(cases[i]->prompt_ids.size());
    const auto got = std::span(logits).subspan(std::size_t(r) * V, std::size_t(T) * V);
    CHECK(sk::test::max_abs_diff(got, cases[i]->prefill_logits) <= kTol);
    r += T;
  }
}

TEST_CASE("a batch naming adapters is refused where they cannot run", "[lora][errors]") {
  auto model = Lora<sk::lora::Gathered>::load(fixture_dir<D>());
  add_adapters(model, 3, 0);
  auto cache = model.make_cache(2);
  std::vector<int32_t> tok{1, 2};
  std::vector<SeqStep> s{{0, 0, 1}, {1, 0, 1}};
  std::vector<float> logits;
  std::vector<int32_t> one{0};
  REQUIRE_THROWS_WITH(model.forward(cache, {tok, s, Logits::Last, one}, logits),
                      Catch::Contains("names 1 adapters for 2 sequences"));
  std::vector<int32_t> bad{0, 7};
  REQUIRE_THROWS_WITH(model.forward(cache, {tok, s, Logits::Last, bad}, logits),
                      Catch::Contains("sequence 1 asks for adapter slot 7, which is empty"));
  model.remove_adapter(1);
  std::vector<int32_t> removed{1, -1};
  REQUIRE_THROWS_WITH(model.forward(cache, {tok, s, Logits::Last, removed}, logits),
                      Catch::Contains("adapter slot 1, which is empty"));
  REQUIRE_THROWS_WITH(
      model.add_adapter(sk::lora::load_adapter<D>(fixture_dir<D>() / "lora" / "r4")),
      Catch::Contains("adapter 'r4' is already loaded"));
  // A model without a LoRA policy refuses any adapter slot.
  auto plain = sk::Gpt2<sk::Config<D>>::load(fixture_dir<D>());
  auto pc = plain.make_cache(2);
  std::vector<int32_t> some{-1, 0};
  REQUIRE_THROWS_WITH(plain.forward(pc, {tok, s, Logits::Last, some}, logits),
                      Catch::Contains("serves no LoRA adapters (lora::None)"));
}

TEMPLATE_TEST_CASE("the engine serves many adapters at once: each request gets its tokens alone",
                   "[lora][engine]", sk::lora::Loop, sk::lora::Gathered, sk::lora::Segmented) {
  using Model = Lora<TestType>;
  auto model = Model::load(fixture_dir<D>());
  const auto names = add_adapters(model, 32, 99);
  for (int n_adapters : {1, 5, 32}) {
    INFO(n_adapters << " distinct adapters");
    auto rs = make_requests({.n = 32, .max_prompt = 60, .max_new = 40}, D::vocab, 7 + n_adapters);
    std::mt19937 rng(n_adapters);
    for (auto& r : rs)  // a quarter on the base model
      if (rng() % 4) r.adapter = names[rng() % n_adapters];
    const auto want = alone_with_adapters(model, rs);
    sk::serve::EngineOptions opt{.max_batch = 8, .max_batched_tokens = 64, .kv_blocks = 24};
    sk::serve::Engine<Model, sched::Continuous> engine(model, tokenizer(), opt);
    auto got = engine.run_all(rs);
    int parted = 0;
    for (std::size_t i = 0; i < rs.size(); i++) {
      INFO("adapter " << rs[i].adapter.value_or("(none)"));
      REQUIRE(got[i].error == "");
      parted += check_same(want[i], got[i], i, true);
    }
    CHECK(parted <= 2);
    // The adapters did act: most adapter requests get other tokens from the base model.
    {
      sk::serve::Engine<Model, sched::Continuous> plain(model, tokenizer(), opt);
      auto base_rs = rs;
      for (auto& r : base_rs) r.adapter.reset();
      auto base = plain.run_all(base_rs);
      int with = 0, differ = 0;
      for (std::size_t i = 0; i < rs.size(); i++)
        if (rs[i].adapter) with++, differ += base[i].ids() != got[i].ids();
      CHECK(differ * 2 > with);
    }
    // An adapter that is not loaded fails only its own request.
    auto unknown = rs[0];
    unknown.adapter = "never-loaded";
    REQUIRE_THROWS_WITH(engine.submit(unknown),
                        Catch::Contains("adapter 'never-loaded' is not in the model"));
  }
}

// The same system prompts sent with different adapters: a cached block is reused only under its
// own adapter (LoRA on c_attn changes K and V), so every request still gets its tokens alone.
TEMPLATE_TEST_CASE("prefix caching with adapters: hits within an adapter, never across",
                   "[lora][engine][prefix]", sk::lora::Gathered, sk::lora::Segmented) {
  using Model = Lora<TestType>;
  auto model = Model::load(fixture_dir<D>());
  const auto names = add_adapters(model, 4, 5);
  auto rs = make_shared_requests({.n = 32, .groups = 2, .prefix = 40, .max_new = 24}, D::vocab, 3);
  std::mt19937 rng(11);
  for (auto& r : rs)
    if (rng() % 5) r.adapter = names[rng() % names.size()];
  const auto want = alone_with_adapters(model, rs);
  sk::serve::EngineOptions opt{.max_batch = 8, .max_batched_tokens = 64, .kv_blocks = 24};
  sk::serve::Engine<Model, sched::Continuous> engine(model, tokenizer(), opt);
  auto got = engine.run_all(rs);
  for (std::size_t i = 0; i < rs.size(); i++) {
    INFO("adapter " << rs[i].adapter.value_or("(none)"));
    REQUIRE(got[i].error == "");
    check_same(want[i], got[i], i, true);
  }
  engine.wait_idle();
  const auto s = engine.stats();
  CHECK(s.prefix_cache_hits > 0);
  CHECK(s.cache_blocks_free == s.cache_blocks);
}

// Speculation with adapters: a draft's rows run under their sequence's adapter like its own
// row, so with four adapters and the base model mixed in a step every request still gets its
// tokens and logprobs alone, greedy and seeded.
TEMPLATE_TEST_CASE("speculation with adapters changes no token or logprob", "[lora][engine][spec]",
                   sk::lora::Gathered, sk::lora::Segmented) {
  using Model = Lora<TestType>;
  auto model = Model::load(fixture_dir<D>());
  const auto names = add_adapters(model, 4, 5);
  for (bool sample : {false, true}) {
    INFO((sample ? "seeded sampling" : "greedy"));
    auto rs =
        make_repetitive_requests({.n = 24, .max_new = 40, .sample = sample}, D::vocab, 5 + sample);
    std::mt19937 rng(12);
    for (auto& r : rs)
      if (rng() % 5) r.adapter = names[rng() % names.size()];
    const auto want = alone_with_adapters(model, rs);
    sk::serve::EngineOptions opt{.max_batch = 8,
                                 .max_batched_tokens = 64,
                                 .kv_blocks = 24,
                                 .speculative = {.k = 4, .rule = sk::serve::SpecRule::always}};
    sk::serve::Engine<Model, sched::Continuous> engine(model, tokenizer(), opt);
    auto got = engine.run_all(rs);
    for (std::size_t i = 0; i < rs.size(); i++) {
      INFO("adapter " << rs[i].adapter.value_or("(none)"));
      REQUIRE(got[i].error == "");
      check_same(want[i], got[i], i, true);
    }
    engine.wait_idle();
    const auto s = engine.stats();
    CHECK(s.spec_accepted > 0);
    CHECK(s.cache_blocks_free == s.cache_blocks);
    {
      INFO("the base model drafting for every adapter");
      using Base = sk::Gpt2<sk::Config<D>>;
      auto drafted = opt;
      drafted.speculative.draft = std::make_shared<sk::serve::DraftModel<Base>>(
          std::make_shared<Base>(Base::load(fixture_dir<D>())), 8);
      sk::serve::Engine<Model, sched::Continuous> e2(model, tokenizer(), drafted);
      auto again = e2.run_all(rs);
      for (std::size_t i = 0; i < rs.size(); i++) {
        INFO("adapter " << rs[i].adapter.value_or("(none)"));
        REQUIRE(again[i].error == "");
        check_same(want[i], again[i], i, true);
      }
      e2.wait_idle();
      CHECK(e2.stats().spec_accepted > 0);
    }
  }
}

TEST_CASE("through the engine, each fixture adapter generates HF + PEFT's greedy tokens",
          "[lora][engine][hf]") {
  using Model = Lora<sk::lora::Segmented>;
  auto model = Model::load(fixture_dir<D>());
  add_adapters(model, 8, 5);
  std::vector<sk::serve::Request> rs;
  std::vector<std::vector<int32_t>> want;
  for (const char* f : kFixtures)
    for (const auto& c : sk::test::load_reference(fixture_dir<D>() / "lora" / f).cases) {
      sk::serve::Request r;
      r.prompt_ids = c.prompt_ids;
      r.adapter = f;
      r.stop = {.max_new_tokens = static_cast<int>(c.greedy_ids.size()), .stop_at_eos = false};
      rs.push_back(r);
      want.push_back(c.greedy_ids);
    }
  sk::serve::Engine<Model, sched::Continuous> engine(model, tokenizer(), {.max_batch = 6});
  auto got = engine.run_all(rs);
  for (std::size_t i = 0; i < rs.size(); i++) {
    INFO("request " << i << " adapter " << *rs[i].adapter);
    CHECK(got[i].ids() == want[i]);
  }
}

TEST_CASE("max_active_adapters bounds the adapters per step and starves none", "[lora][engine]") {
  using Model = Lora<sk::lora::Gathered>;
  auto model = Model::load(fixture_dir<D>());
  const auto names = add_adapters(model, 8, 21);
  auto rs = make_requests({.n = 40, .max_prompt = 40, .max_new = 30}, D::vocab, 77);
  std::mt19937 rng(3);
  for (auto& r : rs)
    if (rng() % 5) r.adapter = names[rng() % names.size()];
  const auto want = alone_with_adapters(model, rs);
  for (int bound : {1, 2, 3}) {
    INFO("max_active_adapters " << bound);
    sk::serve::EngineOptions opt{
        .max_batch = 8, .max_active_adapters = bound, .adapter_slice_steps = 8};
    sk::serve::Engine<Model, sched::Continuous> engine(model, tokenizer(), opt);
    auto got = engine.run_all(rs);  // returns: no request waits forever
    int parted = 0;
    for (std::size_t i = 0; i < rs.size(); i++) {
      REQUIRE(got[i].error == "");
      parted += check_same(want[i], got[i], i, true);
    }
    CHECK(parted <= 2);
    const auto s = engine.stats();
    CHECK(s.max_step_adapters <= bound);
    CHECK(s.max_step_adapters >= 1);
  }
  {  // without a bound the same mix runs more adapters at once
    sk::serve::Engine<Model, sched::Continuous> engine(model, tokenizer(), {.max_batch = 8});
    engine.run_all(rs);
    CHECK(engine.stats().max_step_adapters > 3);
  }
  REQUIRE_THROWS_WITH((sk::serve::Engine<Model, sched::Continuous>(model, tokenizer(),
                                                                   {.max_active_adapters = -1})),
                      Catch::Contains("max_active_adapters must be >= 0"));
}
