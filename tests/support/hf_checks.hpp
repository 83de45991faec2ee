// SPDX-License-Identifier: Apache-2.0
#pragma once
// The HF fixture checks every backend's whole-model test runs: a prompt's logits at every
// position and at each teacher-forced cached decode step, and the ragged batch of the course's
// prompts (HF computed it left-padded). Tolerance and model come from the caller.
#include <catch2/catch.hpp>

#include <span>
#include <vector>

#include "servekit/model/batch.hpp"
#include "servekit/serve/sampling.hpp"
#include "reference.hpp"

namespace servekit::test {

inline std::span<const float> logit_row(const std::vector<float>& m, int r, int V) {
  return std::span(m).subspan(static_cast<std::size_t>(r) * V, V);
}

// The batch's prompts as one ragged prefill step, prompt i in slot i.
struct RaggedStep {
  std::vector<int32_t> tokens;
  std::vector<model::SeqStep> seqs;
};
inline RaggedStep ragged_prefill(const RefBatch& b) {
  RaggedStep r;
  for (std::size_t i = 0; i < b.prompt_ids.size(); i++) {
    r.seqs.push_back({static_cast<int32_t>(i), 0, static_cast<int32_t>(b.prompt_ids[i].size())});
    r.tokens.insert(r.tokens.end(), b.prompt_ids[i].begin(), b.prompt_ids[i].end());
  }
  return r;
}

// One case in cache slot `slot` (empty on entry), through the model's adapter slot `adapter`
// (-1: the base model).
template <class Model>
void check_hf_case(Model& model, typename Model::Cache& cache, int slot, const RefCase& c,
                   int n_steps, float tol, int32_t adapter = -1) {
  const auto ad = adapter >= 0 ? std::span<const int32_t>(&adapter, 1) : std::span<const int32_t>();
  using model::Logits;
  using model::SeqStep;
  constexpr int V = Model::Dims::vocab;
  const int T = static_cast<int>(c.prompt_ids.size());
  std::vector<float> logits;
  SeqStep s{slot, 0, T};
  model.forward(cache, {c.prompt_ids, std::span(&s, 1), Logits::All, ad}, logits);
  REQUIRE(logits.size() == c.prefill_logits.size());
  CHECK(max_abs_diff(logits, c.prefill_logits) <= tol);
  CHECK(serve::argmax(logit_row(logits, T - 1, V)) == c.greedy_ids[0]);
  int n_past = T;
  for (int step = 0; step < n_steps; step++) {
    INFO("decode step " << step);
    int32_t next = c.greedy_ids[step];  // teacher-forced: a one-token slip must not cascade
    SeqStep d{slot, n_past++, 1};
    model.forward(cache, {std::span(&next, 1), std::span(&d, 1), Logits::Last, ad}, logits);
    REQUIRE(logits.size() == static_cast<std::size_t>(V));
    CHECK(max_abs_diff(logits, logit_row(c.step_logits, step, V)) <= tol);
    CHECK(serve::argmax(logits) == c.greedy_ids[step + 1]);
  }
}

// The batch's prompts in slots 0..B-1 of an empty cache: one prefill step with every
// position's logits, then batched decode steps feeding HF's batched greedy tokens.
template <class Model>
void check_hf_batch(Model& model, typename Model::Cache& cache, const RefBatch& b, float tol) {
  using model::Logits;
  using model::SeqStep;
  constexpr int V = Model::Dims::vocab;
  const int B = static_cast<int>(b.prompt_ids.size());
  auto [tokens, seqs] = ragged_prefill(b);
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
      CHECK(max_abs_diff(logit_row(logits, r, V), want) <= tol);
    }
  }
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
      CHECK(max_abs_diff(logit_row(logits, i, V), want) <= tol);
      CHECK(serve::argmax(logit_row(logits, i, V)) == b.greedy_ids[i][step + 1]);
    }
  }
}

// Two models run side by side over every HF case: the prompt (every position's logits), then
// the decode steps fed HF's greedy tokens; step(a_logits, b_logits) is called after each.
// slot: both through the adapter in that slot (-1: the base model).
template <class A, class B, class Step>
void side_by_side(A& a, B& b, const Reference& ref, const Step& step, int32_t slot = -1) {
  using model::Logits;
  using model::SeqStep;
  for (const auto& c : ref.cases) {
    INFO("case " << c.name);
    const int T = static_cast<int>(c.prompt_ids.size());
    auto ac = a.make_cache(1);
    auto bc = b.make_cache(1);
    std::vector<float> al, bl;
    SeqStep s{0, 0, T};
    const std::span<const int32_t> ad =
        slot >= 0 ? std::span(&slot, 1) : std::span<const int32_t>{};
    a.forward(ac, {c.prompt_ids, std::span(&s, 1), Logits::All, ad}, al);
    b.forward(bc, {c.prompt_ids, std::span(&s, 1), Logits::All, ad}, bl);
    REQUIRE(al.size() == bl.size());
    step(al, bl);
    for (int i = 0; i < ref.n_steps; i++) {
      INFO("decode step " << i);
      int32_t next = c.greedy_ids[i];
      SeqStep d{0, T + i, 1};
      a.forward(ac, {std::span(&next, 1), std::span(&d, 1), Logits::Last, ad}, al);
      b.forward(bc, {std::span(&next, 1), std::span(&d, 1), Logits::Last, ad}, bl);
      step(al, bl);
    }
  }
}

}  // namespace servekit::test
