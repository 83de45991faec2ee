// SPDX-License-Identifier: Apache-2.0
// The engine's invariant with the CUDA kernels, run by the emulator here and, compiled by nvcc
// (tests/cuda/test_engine_cuda.cu), by a GPU: continuous and static batching give each request
// its tokens alone, greedy and seeded, on both cache layouts, with preemption and chunked
// prefill forced on the paged one; so do prefix caching, speculation and many adapters at once.
#include "engine_support.hpp"
#include "support/lora_case.hpp"
#include "support/reference.hpp"
#include "servekit/lora/random_adapter.hpp"
#include "device_backend.hpp"

using Catch::Contains;

namespace sk = servekit;
namespace serve = servekit::serve;
namespace sched = servekit::serve::sched;
using namespace servekit::test::engine;

using D = sk::dims::Tiny<2, 4, 64, 512, 128>;
using Dev = device_test::Backend;
using Contig = sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Contiguous, sk::lora::None, Dev>>;
using Paged = sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Paged<8>, sk::lora::None, Dev>>;

TEMPLATE_TEST_CASE("device kernels: continuous and static batching == alone", "[engine][emulated]",
                   Contig, Paged) {
  auto m = TestType::random(5);
  for (bool sample : {false, true}) {
    INFO((sample ? "seeded sampling" : "greedy"));
    auto rs = make_requests(
        {.n = 10, .max_prompt = 60, .min_new = 20, .max_new = 40, .sample = sample}, D::vocab, 7);
    auto want = alone(m, rs);
    serve::EngineOptions opt{.max_batch = 4, .max_batched_tokens = 24};
    if constexpr (std::is_same_v<TestType, Paged>)
      opt.kv_blocks = 16;  // the least: one 128-row sequence
    auto s = run_and_compare<TestType, sched::Continuous>(m, rs, want, opt);
    CHECK(s.chunked_prefills > 0);
    if constexpr (std::is_same_v<TestType, Paged>) CHECK(s.preemptions > 0);
    if (!sample) run_and_compare<TestType, sched::Static>(m, rs, want, {.max_batch = 4});
  }
}

// A prompt's log-probabilities through the device sampler's path: every row of a chunk that holds
// prompt positions gets logits, downloaded beside the step's picks; the values are the prompt's in
// one forward alone, chunked and (paged) preempted, with no new token where none is asked for.
TEMPLATE_TEST_CASE("device kernels: prompt log-probabilities == the prompt alone",
                   "[engine][emulated][prompt_logprobs]", Contig, Paged) {
  auto m = TestType::random(5);
  auto rs = make_requests({.n = 8, .max_prompt = 60, .min_new = 10, .max_new = 30}, D::vocab, 9);
  for (std::size_t i = 0; i < rs.size(); i += 2) rs[i].prompt_logprobs = static_cast<int>(i % 3);
  rs[2].stop.max_new_tokens = 0;
  auto want = alone(m, rs);
  serve::EngineOptions opt{.max_batch = 4, .max_batched_tokens = 24};
  if constexpr (std::is_same_v<TestType, Paged>) opt.kv_blocks = 16;
  std::vector<serve::Result> got;
  auto s = run_and_compare<TestType, sched::Continuous>(m, rs, want, opt, &got);
  CHECK(s.chunked_prefills > 0);
  if constexpr (std::is_same_v<TestType, Paged>) CHECK(s.preemptions > 0);
  for (std::size_t i = 0; i < rs.size(); i += 2) {
    INFO("request " << i << ", prompt " << rs[i].prompt_ids.size() << " tokens");
    check_same_prompt(alone_prompt(m, rs[i].prompt_ids, rs[i].prompt_logprobs),
                      got[i].prompt_logprobs, kExact<TestType>);
  }
  CHECK(got[2].tokens.empty());
  CHECK(got[2].finish_reason == "length");
}

// Prefix caching with the CUDA kernels: a cached prefix's rows are read by the attention kernels
// through shared block-table entries, and nothing of a request's output changes.
TEST_CASE("device kernels: prefix caching changes no token or logprob",
          "[engine][emulated][prefix]") {
  auto m = Paged::random(5);
  for (bool sample : {false, true}) {
    INFO((sample ? "seeded sampling" : "greedy"));
    auto rs = make_shared_requests(
        {.n = 12, .prefix = 40, .max_suffix = 20, .min_new = 10, .max_new = 30, .sample = sample},
        D::vocab, 8 + sample);
    auto want = alone(m, rs);
    serve::EngineOptions opt{.max_batch = 4, .max_batched_tokens = 24, .kv_blocks = 16};
    auto s = run_and_compare<Paged, sched::Continuous>(m, rs, want, opt);
    CHECK(s.prefix_cache_hits > 0);
    CHECK(s.preemptions > 0);
  }
}

// Speculation with the CUDA kernels: a draft's rows are a prefill-shaped part of a decode step
// and each of its rows is picked on the device with its own draw (RowSampling::index), and
// still every token and logprob is plain decoding's.
TEMPLATE_TEST_CASE("device kernels: speculation changes no token or logprob",
                   "[engine][emulated][spec]", Contig, Paged) {
  auto m = TestType::random(5);
  for (bool sample : {false, true}) {
    INFO((sample ? "seeded sampling" : "greedy"));
    auto rs =
        make_repetitive_requests({.n = 10, .max_new = 40, .sample = sample}, D::vocab, 9 + sample);
    auto want = alone(m, rs);
    serve::EngineOptions opt{.max_batch = 4,
                             .max_batched_tokens = 24,
                             .speculative = {.k = 4, .rule = serve::SpecRule::always}};
    if constexpr (std::is_same_v<TestType, Paged>) opt.kv_blocks = 16;
    auto s = run_and_compare<TestType, sched::Continuous>(m, rs, want, opt);
    CHECK(s.spec_accepted > 0);
    if constexpr (std::is_same_v<TestType, Paged>) CHECK(s.preemptions > 0);
    {
      INFO("a draft model proposing (the target's twin, picking on the device too)");
      opt.speculative.draft = std::make_shared<serve::DraftModel<Contig>>(
          std::make_shared<Contig>(Contig::random(5)), 2);
      auto q = run_and_compare<TestType, sched::Continuous>(m, rs, want, opt);
      CHECK(q.spec_proposed > 0);
      if (!sample) CHECK(q.spec_accepted == q.spec_proposed);
      if (sample) CHECK(q.spec_accepted > 0);
    }
  }
}

// Many adapters at once through the LoRA kernels: a mix of 1, 12 and 32 adapters and base rows
// gives every request the tokens it gets alone with its adapter, under every dispatch policy,
// and with fp16 weights under the segmented policy's tensor-core kernels on 16-bit adapters.
TEMPLATE_TEST_CASE("device kernels: the engine serves many adapters at once, each request as alone",
                   "[lora][emulated][engine]",
                   (sk::test::LoraCase<sk::lora::Loop, sk::weights::F32>),
                   (sk::test::LoraCase<sk::lora::Gathered, sk::weights::F32>),
                   (sk::test::LoraCase<sk::lora::Segmented, sk::weights::F32>),
                   (sk::test::LoraCase<sk::lora::Segmented, sk::weights::F16>)) {
  using A = sk::dims::TinyA;
  using Model = sk::Gpt2<
      sk::Config<A, typename TestType::Weights, sk::kv::Paged<16>, typename TestType::Lora, Dev>>;
  auto model = Model::load(sk::test::fixture_dir<A>());
  std::mt19937_64 gen(17);
  std::vector<std::string> names;
  for (int i = 0; i < 32; i++) {
    names.push_back("rand" + std::to_string(i));
    sk::lora::RandomAdapterSpec spec{.name = names.back(),
                                     .rank = 1 + static_cast<int>(gen() % 16)};
    spec.alpha = 2.f * spec.rank;
    spec.stddev = 0.07f;
    for (int t = 0; t < sk::lora::kTargets; t++) spec.targets[t] = (gen() % 3) != 0;
    spec.targets[gen() % 4] = true;
    spec.layer_share = 0.75;
    model.add_adapter(sk::lora::random_adapter<A>(spec, gen));
  }
  for (int n_adapters : {1, 12, 32}) {
    INFO(n_adapters << " distinct adapters");
    const int n = n_adapters == 32 ? 40 : 14;
    auto rs = make_requests({.n = n, .max_prompt = 40, .max_new = 16}, A::vocab, 3 + n_adapters);
    std::mt19937 rng(n_adapters);
    for (auto& r : rs)
      if (rng() % 4) r.adapter = names[rng() % n_adapters];
    sk::serve::Engine<Model, sched::Sequential<sched::KvCache>> one(model, tokenizer(),
                                                                    {.max_batch = 1});
    auto alone_rs = rs;
    for (auto& r : alone_rs) r.top_logprobs = kExact<Model> ? 0 : 2;
    const auto want = one.run_all(alone_rs);
    sk::serve::Engine<Model, sched::Continuous> engine(model, tokenizer(),
                                                       {.max_batch = 6, .max_batched_tokens = 48});
    const auto got = engine.run_all(rs);
    int parted = 0;
    for (std::size_t i = 0; i < rs.size(); i++) {
      INFO("adapter " << rs[i].adapter.value_or("(none)"));
      REQUIRE(got[i].error == "");
      parted += check_same(want[i], got[i], i, kExact<Model>);
    }
    CHECK(parted <= 2);
    if (n_adapters > 1) CHECK(engine.stats().max_step_adapters > 1);
  }
}

// Speculation (n-gram, and a draft model: the base model drafting for every adapter) with the
// CUDA kernels under every scheduler, with adapters and the base model mixed, and with stop
// strings and end-of-text falling inside accepted runs: every request gets, bit for bit, the
// tokens and logprobs it gets alone through a one-request engine without speculation.
TEST_CASE("device kernels: speculation with every scheduler, adapters, stop strings and EOS",
          "[engine][emulated][spec][lora]") {
  using A = sk::dims::TinyA;
  using Model =
      sk::Gpt2<sk::Config<A, sk::weights::F32, sk::kv::Paged<16>, sk::lora::Segmented, Dev>>;
  using Base = sk::Gpt2<sk::Config<A, sk::weights::F32, sk::kv::Contiguous, sk::lora::None, Dev>>;
  auto model = Model::load(sk::test::fixture_dir<A>());
  std::mt19937_64 gen(23);
  std::vector<std::string> names;
  for (int i = 0; i < 4; i++) {
    names.push_back("r" + std::to_string(i));
    sk::lora::RandomAdapterSpec spec{.name = names.back(), .rank = 4 + 4 * i};
    spec.alpha = 2.f * spec.rank;
    spec.stddev = 0.07f;
    model.add_adapter(sk::lora::random_adapter<A>(spec, gen));
  }
  auto base = std::make_shared<Base>(Base::load(sk::test::fixture_dir<A>()));
  for (bool sample : {false, true}) {
    INFO((sample ? "seeded sampling" : "greedy"));
    auto rs =
        make_repetitive_requests({.n = 12, .max_new = 30, .sample = sample}, A::vocab, 4 + sample);
    for (std::size_t i = 0; i < rs.size(); i++)
      if (i % 4) rs[i].adapter = names[i % names.size()];
    auto run_alone = [&] {
      sk::serve::Engine<Model, sched::Sequential<sched::KvCache>> one(model, tokenizer(),
                                                                      {.max_batch = 1});
      return one.run_all(rs);
    };
    auto want = run_alone();
    // A stop string from the middle of some texts, a token generated halfway as others' EOS.
    for (std::size_t i = 0; i < rs.size(); i++) {
      if (i % 3 == 1 && want[i].text.size() > 8)
        rs[i].stop.stop_strings = {want[i].text.substr(want[i].text.size() / 2, 3)};
      else if (i % 3 == 2 && want[i].tokens.size() > 12)
        rs[i].stop.stop_at_eos = true, rs[i].stop.eos_id = want[i].tokens[12].id;
    }
    want = run_alone();
    int stopped = 0;
    for (const auto& w : want) stopped += w.finish_reason == "stop" || w.finish_reason == "eos";
    CHECK(stopped >= 4);
    for (bool draft : {false, true}) {
      INFO((draft ? "a draft model" : "n-gram lookup"));
      sk::serve::EngineOptions opt{.max_batch = 4,
                                   .max_batched_tokens = 32,
                                   .speculative = {.k = 4, .rule = sk::serve::SpecRule::always}};
      auto fresh_draft = [&] {
        if (draft) opt.speculative.draft = std::make_shared<sk::serve::DraftModel<Base>>(base, 4);
      };
      fresh_draft();
      auto s = run_and_compare<Model, sched::Continuous>(model, rs, want, opt);
      CHECK(s.spec_accepted > 0);
      fresh_draft();
      auto q = run_and_compare<Model, sched::Sequential<>>(model, rs, want, opt);
      CHECK(q.spec_accepted > 0);
      fresh_draft();
      run_and_compare<Model, sched::Static>(model, rs, want, opt);
    }
  }
}

TEST_CASE("device kernels: tokens are picked on the device, each row with its own parameters",
          "[engine][emulated][sampling]") {
  static_assert(Contig::kDeviceSampling && Paged::kDeviceSampling);
  static_assert(!sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Contiguous>>::kDeviceSampling);
  auto m = Contig::random(6);
  auto cache = m.make_cache(4);
  // Four prompts in one prefill step, each row with other parameters.
  std::vector<int32_t> tokens;
  std::vector<sk::model::SeqStep> seqs;
  for (int s = 0; s < 4; s++) {
    seqs.push_back({s, 0, 5 + s, 0});
    for (int j = 0; j < 5 + s; j++) tokens.push_back((s * 97 + j * 31) % D::vocab);
  }
  const std::vector<sk::kernels::RowSampling> rows = {
      {.seed = 1, .index = 0, .temperature = 0.f},
      {.seed = 2, .index = 3, .temperature = 1.f},
      {.seed = 3, .index = 0, .temperature = 0.7f, .top_k = 20},
      {.seed = 4, .index = 9, .temperature = 1.2f, .top_p = 0.8f}};
  std::vector<int32_t> ids(4, -2);
  std::vector<float> lp(4), logits;
  const sk::model::Batch batch{tokens, seqs, sk::model::Logits::Last, {}};
  m.forward_pick(cache, batch, rows, ids, lp, &logits);
  REQUIRE(logits.size() == 4u * D::vocab);
  serve::Sampler host;
  for (int s = 0; s < 4; s++) {
    INFO("row " << s);
    const std::span<const float> row(logits.data() + std::size_t(s) * D::vocab, D::vocab);
    const serve::SamplingParams p{.temperature = rows[s].temperature,
                                  .top_k = rows[s].top_k,
                                  .top_p = rows[s].top_p,
                                  .seed = rows[s].seed};
    CHECK(ids[s] == host(row, p, rows[s].index));
    CHECK(lp[s] == Approx(serve::logprob_of(row, ids[s])).margin(1e-5));
  }
  // The same step without the logits download picks the same tokens.
  auto again = m.make_cache(4);
  std::vector<int32_t> ids2(4, -2);
  std::vector<float> lp2(4);
  m.forward_pick(again, batch, rows, ids2, lp2);
  CHECK(ids2 == ids);
  CHECK(lp2 == lp);

  // Bad calls name what is wrong and leave the model usable.
  auto bad = rows;
  bad[2].top_p = 0.f;
  REQUIRE_THROWS_WITH(m.forward_pick(again, batch, bad, ids2, lp2),
                      Contains("row 2") && Contains("top_p"));
  REQUIRE_THROWS_WITH(m.forward_pick(again, batch, std::span(rows).first(3), ids2, lp2),
                      Contains("4 sequences") && Contains("3 sampling rows"));
  const sk::model::Batch all{tokens, seqs, sk::model::Logits::All, {}};
  REQUIRE_THROWS_WITH(m.forward_pick(again, all, rows, ids2, lp2), Contains("Logits::All"));
}
