// SPDX-License-Identifier: Apache-2.0
// The host decoder against Hugging Face: logits at every prompt position and every greedy
// decode step, with and without the KV cache, and a ragged batch of the course's prompts.
#include <catch2/catch.hpp>

#include "servekit/model/gpt2.hpp"
#include "servekit/serve/sampling.hpp"
#include "support/reference.hpp"

namespace sk = servekit;
using sk::model::Batch;
using sk::model::Logits;
using sk::model::SeqStep;

namespace {
constexpr float kTol = 1e-4f;  // fp32 compute on both sides; only summation order differs

template <class D>
std::filesystem::path fixture_dir() {
  return std::filesystem::path(SERVEKIT_FIXTURES) / std::string(D::name);
}

std::span<const float> row(const std::vector<float>& m, int r, int V) {
  return std::span(m).subspan(static_cast<std::size_t>(r) * V, V);
}
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

    {  // prefill logits at every position, then cached decode steps
      SeqStep s{0, 0, T};
      model.forward(cache, {c.prompt_ids, std::span(&s, 1), Logits::All}, logits);
      REQUIRE(logits.size() == c.prefill_logits.size());
      CHECK(sk::test::max_abs_diff(logits, c.prefill_logits) <= kTol);
      int32_t next = sk::serve::argmax(row(logits, T - 1, V));
      CHECK(next == c.greedy_ids[0]);
      int n_past = T;
      for (int step = 0; step < ref.n_steps; step++) {
        INFO("decode step " << step);
        next = c.greedy_ids[step];  // teacher-forced: a one-token slip must not cascade
        SeqStep d{0, n_past++, 1};
        model.forward(cache, {std::span(&next, 1), std::span(&d, 1), Logits::Last}, logits);
        CHECK(sk::test::max_abs_diff(logits, row(c.step_logits, step, V)) <= kTol);
        CHECK(sk::serve::argmax(logits) == c.greedy_ids[step + 1]);
      }
    }

    {  // no cache: recomputing the whole sequence gives the same logits
      std::vector<int32_t> seq = c.prompt_ids;
      for (int step = 0; step <= ref.n_steps; step++) {
        INFO("recompute step " << step);
        SeqStep s{0, 0, static_cast<int32_t>(seq.size())};
        model.forward(cache, {seq, std::span(&s, 1), Logits::Last}, logits);
        auto want = step == 0 ? row(c.prefill_logits, T - 1, V) : row(c.step_logits, step - 1, V);
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
  constexpr int V = D::vocab;
  auto model = sk::Gpt2<sk::Config<D>>::load(fixture_dir<D>());
  const auto ref = sk::test::load_reference(fixture_dir<D>());
  const auto& b = ref.batch;
  const int B = static_cast<int>(b.prompt_ids.size());
  REQUIRE(B == 3);
  auto cache = model.make_cache(B);

  // Prefill all prompts in one step, every position's logits.
  std::vector<int32_t> tokens;
  std::vector<SeqStep> seqs;
  for (int i = 0; i < B; i++) {
    seqs.push_back({i, 0, static_cast<int32_t>(b.prompt_ids[i].size())});
    tokens.insert(tokens.end(), b.prompt_ids[i].begin(), b.prompt_ids[i].end());
  }
  std::vector<float> logits;
  model.forward(cache, {tokens, seqs, Logits::All}, logits);
  int r = 0;
  for (int i = 0; i < B; i++) {
    const int T = static_cast<int>(b.prompt_ids[i].size());
    const int pad = b.t_pad - T;  // left padding in HF's batch
    for (int t = 0; t < T; t++, r++) {
      INFO("sequence " << i << " position " << t);
      REQUIRE(b.attention_mask[i * b.t_pad + pad + t] == 1);
      auto want =
          std::span(b.logits).subspan((static_cast<std::size_t>(i) * b.t_pad + pad + t) * V, V);
      CHECK(sk::test::max_abs_diff(row(logits, r, V), want) <= kTol);
    }
  }
  // Decode all three together, feeding HF's batched greedy tokens.
  std::vector<int32_t> n_past(B);
  for (int i = 0; i < B; i++) n_past[i] = static_cast<int32_t>(b.prompt_ids[i].size());
  for (int step = 0; step < b.n_steps; step++) {
    tokens.clear(), seqs.clear();
    for (int i = 0; i < B; i++) {
      tokens.push_back(b.greedy_ids[i][step]);
      seqs.push_back({i, n_past[i]++, 1});
    }
    model.forward(cache, {tokens, seqs, Logits::Last}, logits);
    for (int i = 0; i < B; i++) {
      INFO("sequence " << i << " decode step " << step);
      auto want =
          std::span(b.step_logits).subspan((static_cast<std::size_t>(i) * b.n_steps + step) * V, V);
      CHECK(sk::test::max_abs_diff(row(logits, i, V), want) <= kTol);
      CHECK(sk::serve::argmax(row(logits, i, V)) == b.greedy_ids[i][step + 1]);
    }
  }
}
