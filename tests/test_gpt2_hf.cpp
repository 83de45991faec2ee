// SPDX-License-Identifier: Apache-2.0
// The host decoder against Hugging Face: logits at every prompt position and every greedy
// decode step, with and without the KV cache, and a ragged batch of the course's prompts.
#include <catch2/catch.hpp>

#include "servekit/model/gpt2.hpp"
#include "servekit/serve/sampling.hpp"
#include "support/hf_checks.hpp"

namespace sk = servekit;
using sk::model::Batch;
using sk::model::Logits;
using sk::model::SeqStep;

namespace {
constexpr float kTol = 1e-4f;  // fp32 compute on both sides; only summation order differs

using servekit::test::fixture_dir;

}  // namespace

TEMPLATE_TEST_CASE("gpt2 matches HF logits and greedy tokens", "[hf]", sk::dims::TinyA,
                   sk::dims::TinyB) {
  using D = TestType;
  constexpr int V = D::vocab;
  auto model = sk::Gpt2<sk::Config<D>>::load(fixture_dir<D>());
  const auto ref = sk::test::load_reference(fixture_dir<D>());
  REQUIRE(ref.cases.size() >= 6);
  auto cache = model.make_cache(1);
  std::vector<float> logits;

  for (const auto& c : ref.cases) {
    INFO("case " << c.name << " (" << c.prompt_ids.size() << " prompt tokens)");
    const int T = static_cast<int>(c.prompt_ids.size());

    sk::test::check_hf_case(model, cache, 0, c, ref.n_steps, kTol);

    {  // no cache: recomputing the whole sequence gives the same logits
      std::vector<int32_t> seq = c.prompt_ids;
      for (int step = 0; step <= ref.n_steps; step++) {
        INFO("recompute step " << step);
        SeqStep s{0, 0, static_cast<int32_t>(seq.size())};
        model.forward(cache, {seq, std::span(&s, 1), Logits::Last}, logits);
        auto want = step == 0 ? sk::test::logit_row(c.prefill_logits, T - 1, V)
                              : sk::test::logit_row(c.step_logits, step - 1, V);
        CHECK(sk::test::max_abs_diff(logits, want) <= kTol);
        CHECK(sk::serve::argmax(logits) == c.greedy_ids[step]);
        seq.push_back(c.greedy_ids[step]);
      }
    }
  }
}

TEMPLATE_TEST_CASE("a ragged batch gives each sequence HF's left-padded batch logits",
                   "[hf][batch]", sk::dims::TinyA, sk::dims::TinyB) {
  using D = TestType;
  auto model = sk::Gpt2<sk::Config<D>>::load(fixture_dir<D>());
  const auto ref = sk::test::load_reference(fixture_dir<D>());
  const auto& b = ref.batch;
  const int B = static_cast<int>(b.prompt_ids.size());
  REQUIRE(B == 3);
  auto cache = model.make_cache(B);
  sk::test::check_hf_batch(model, cache, b, kTol);
}
