// SPDX-License-Identifier: Apache-2.0
// A prompt's log-probabilities (Request::prompt_logprobs): HF's on the tiny-a fixture, and the
// same bits as the whole prompt in one forward alone, whatever shares the step, however the
// prompt is chunked, after a preemption, beside other requests' prefix-cache hits and
// speculation, on every scheduler; with max_new_tokens 0 the prompt runs and nothing is
// generated.
#include <algorithm>
#include <cmath>

#include "engine_support.hpp"
#include "host_engine_models.hpp"
#include "support/reference.hpp"

namespace sk = servekit;
namespace serve = servekit::serve;
namespace sched = servekit::serve::sched;
using namespace servekit::test::engine;

TEST_CASE("prompt log-probabilities are HF's (tiny-a)", "[engine][prompt_logprobs]") {
  using TinyA = sk::dims::TinyA;
  using Model = sk::Gpt2<sk::Config<TinyA, sk::weights::F32, sk::kv::Paged<16>>>;
  const auto dir = sk::test::fixture_dir<TinyA>();
  auto m = Model::load(dir);
  const auto ref = sk::test::load_reference(dir);
  std::vector<serve::Request> rs;
  for (const auto& c : ref.cases) {
    serve::Request r;
    r.prompt_ids = c.prompt_ids;
    r.stop.max_new_tokens = 1;
    r.prompt_logprobs = 1;
    rs.push_back(r);
  }
  serve::Engine<Model, sched::Continuous> engine(m, tokenizer(), {});
  const auto got = engine.run_all(rs);
  constexpr int V = TinyA::vocab;
  // A logprob is a logit less the row's log-sum-exp, each within the logits' 1e-4 of HF's
  // (test_gpt2_hf: fp32 on both sides, only the summation order differs).
  constexpr float kTol = 2e-4f;
  std::vector<float> lp;
  for (std::size_t n = 0; n < ref.cases.size(); n++) {
    const auto& c = ref.cases[n];
    INFO("case " << c.name);
    REQUIRE(got[n].error == "");
    const auto& p = got[n].prompt_logprobs;
    REQUIRE(p.size() == c.prompt_ids.size() - 1);
    for (std::size_t i = 0; i < p.size(); i++) {
      INFO("prompt position " << i);
      serve::log_softmax(std::span<const float>(c.prefill_logits.data() + i * V, V), lp);
      CHECK(p[i].id == c.prompt_ids[i + 1]);
      CHECK(std::abs(p[i].logprob - lp[c.prompt_ids[i + 1]]) <= kTol);
      REQUIRE(p[i].top.size() == 1);
      CHECK(std::abs(p[i].top[0].logprob - *std::max_element(lp.begin(), lp.end())) <= kTol);
    }
    // The first generated token is HF's greedy one, as without prompt log-probabilities.
    REQUIRE(got[n].tokens.size() == 1);
    CHECK(got[n].tokens[0].id == c.greedy_ids[0]);
  }
}

TEMPLATE_TEST_CASE("prompt log-probabilities: the same bits alone and in any step",
                   "[engine][prompt_logprobs]", Contig, Paged) {
  auto& m = model<TestType>();
  // Every third request asks for its prompt's log-probabilities (the others for none), with 0
  // to 4 alternatives; one asks for no new token at all.
  auto rs = make_requests({.n = 12, .max_prompt = 300, .max_new = 40}, D::vocab, 31);
  for (std::size_t i = 0; i < rs.size(); i += 3) rs[i].prompt_logprobs = static_cast<int>(i % 5);
  rs[3].stop.max_new_tokens = 0;
  std::vector<std::vector<serve::PromptToken>> want_prompt(rs.size());
  for (std::size_t i = 0; i < rs.size(); i++)
    if (rs[i].prompt_logprobs >= 0)
      want_prompt[i] = alone_prompt(m, rs[i].prompt_ids, rs[i].prompt_logprobs);
  auto want = alone(m, rs);  // the generated tokens, as without prompt log-probabilities
  auto check = [&]<class Sched>(serve::EngineOptions opt) {
    std::vector<serve::Result> got;
    auto s = run_and_compare<TestType, Sched>(m, rs, want, opt, &got);
    for (std::size_t i = 0; i < rs.size(); i++) {
      INFO("request " << i << ", prompt " << rs[i].prompt_ids.size() << " tokens");
      if (rs[i].prompt_logprobs < 0) {
        CHECK(got[i].prompt_logprobs.empty());
        continue;
      }
      check_same_prompt(want_prompt[i], got[i].prompt_logprobs, true);
    }
    CHECK(got[3].tokens.empty());
    CHECK(got[3].finish_reason == "length");
    return s;
  };
  serve::EngineOptions opt{.max_batch = 8, .max_batched_tokens = 256};
  SECTION("continuous, prompts chunked") {
    auto s = check.template operator()<sched::Continuous>(opt);
    CHECK(s.chunked_prefills > 0);
  }
  SECTION("static") {
    check.template operator()<sched::Static>(opt);
  }
  SECTION("sequential") {
    check.template operator()<sched::Sequential<>>(opt);
  }
  if constexpr (std::is_same_v<TestType, Contig>) {
    SECTION("sequential without a cache: every step recomputes, the prompt is scored once") {
      check.template operator()<sched::Sequential<sched::NoCache>>({.max_batch = 1});
    }
  }
  if constexpr (std::is_same_v<TestType, Paged>) {
    SECTION("continuous, a pool too small for the batch: preemption by recompute") {
      opt.kv_blocks = 40;
      opt.max_batched_tokens = 64;
      auto s = check.template operator()<sched::Continuous>(opt);
      CHECK(s.preemptions > 0);
    }
  }
}

TEST_CASE("prompt log-probabilities beside prefix-cache hits: every position computed",
          "[engine][prompt_logprobs][prefix]") {
  auto& m = model<Paged>();
  // Requests sharing a 100-token prefix: those that want their prompt's log-probabilities
  // compute it whole, the others may map it from the cache.
  auto rs =
      make_shared_requests({.n = 12, .prefix = 100, .max_suffix = 40, .max_new = 20}, D::vocab, 41);
  for (std::size_t i = 1; i < rs.size(); i += 2) rs[i].prompt_logprobs = 2;
  auto want = alone(m, rs);
  serve::EngineOptions opt{.max_batch = 4, .max_batched_tokens = 128};
  std::vector<serve::Result> got;
  auto s = run_and_compare<Paged, sched::Continuous>(m, rs, want, opt, &got);
  CHECK(s.prefix_cache_hits > 0);  // the others did hit
  for (std::size_t i = 0; i < rs.size(); i++) {
    INFO("request " << i);
    if (rs[i].prompt_logprobs < 0) continue;
    CHECK(got[i].metrics.cached_tokens == 0);
    check_same_prompt(alone_prompt(m, rs[i].prompt_ids, 2), got[i].prompt_logprobs, true);
  }
}

TEST_CASE("prompt log-probabilities beside speculating requests, and speculating themselves",
          "[engine][prompt_logprobs][spec]") {
  auto& m = model<Paged>();
  // Repetitive texts, so that proposals are made and accepted; half of them score their prompt
  // (and then decode, speculating like the others).
  auto rs = make_repetitive_requests({.n = 16, .max_new = 60}, D::vocab, 51);
  for (std::size_t i = 0; i < rs.size(); i += 2) rs[i].prompt_logprobs = 1;
  const auto want = alone(m, rs);
  serve::EngineOptions opt{.max_batch = 8,
                           .max_batched_tokens = 64,
                           .speculative = {.k = 4, .rule = serve::SpecRule::always}};
  std::vector<serve::Result> got;
  auto s = run_and_compare<Paged, sched::Continuous>(m, rs, want, opt, &got);
  CHECK(s.spec_accepted > 0);
  long scored_accepted = 0;
  for (std::size_t i = 0; i < rs.size(); i += 2) {
    INFO("request " << i);
    check_same_prompt(alone_prompt(m, rs[i].prompt_ids, 1), got[i].prompt_logprobs, true);
    scored_accepted += got[i].metrics.spec_accepted;
  }
  CHECK(scored_accepted > 0);
}

TEST_CASE("prompt_logprobs out of range is refused, naming it", "[engine][prompt_logprobs]") {
  auto& m = model<Paged>();
  serve::Engine<Paged, sched::Continuous> engine(m, tokenizer(), {});
  serve::Request r;
  r.prompt_ids = {1, 2, 3};
  r.prompt_logprobs = -2;
  CHECK_THROWS_WITH(engine.submit(r), Catch::Contains("prompt_logprobs must be in [0, 512]"));
  r.prompt_logprobs = D::vocab + 1;
  CHECK_THROWS_WITH(engine.submit(r), Catch::Contains("prompt_logprobs must be in [0, 512]"));
}
