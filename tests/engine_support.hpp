// SPDX-License-Identifier: Apache-2.0
#pragma once
// The engine's invariant, shared by test_engine (host) and test_engine_emulated: with greedy
// decoding (and with seeded sampling) every scheduler gives every request exactly the tokens
// that serve::generate gives it alone.
//
// On the host and under emulation, logits are bitwise batch-invariant (each output sums in one
// order whatever the step's rows and threads, and whichever device kernel the row count picks:
// kernels/host/matmul.hpp, kernels/common.hpp, kernels/attention_state.hpp), so every token and
// its logprob must agree. On a real GPU (not tested here) two greedy runs may part where the
// alone run's top-2 logits are within kNearTie: then the comparison of that request stops
// there, and the part is counted. Any other difference fails.
#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>

#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <random>
#include <type_traits>
#include <vector>

#include "servekit/model/gpt2.hpp"
#include "servekit/serve/engine.hpp"
#include "servekit/serve/generate.hpp"

namespace servekit::test::engine {

constexpr float kNearTie = 1e-3f;

inline const text::Gpt2Tokenizer& tokenizer() {
  static auto tok = text::Gpt2Tokenizer::from_dir(std::filesystem::path(SERVEKIT_DATA) / "gpt2");
  return tok;
}

struct Mix {
  int n = 40, min_prompt = 1, max_prompt = 300, min_new = 1, max_new = 200;
  bool sample = false;
};

// Random prompts of ids below V (the GPT-2 vocabulary's ids decode, so text streams too).
inline std::vector<serve::Request> make_requests(const Mix& m, int V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<serve::Request> rs(m.n);
  for (auto& r : rs) {
    r.prompt_ids.resize(uni(m.min_prompt, m.max_prompt));
    for (auto& t : r.prompt_ids) t = uni(0, V - 1);
    r.stop.max_new_tokens = uni(m.min_new, m.max_new);
    r.stop.stop_at_eos = false;
    if (m.sample) r.sampling = {.temperature = 0.8f, .top_k = 40, .top_p = 0.9f, .seed = rng()};
  }
  return rs;
}

// Requests that share prefixes, as chat and agent traffic does: `groups` system prompts of
// `prefix` tokens, each request one of them and a suffix of its own; every `repeat`-th request
// resends an earlier request's prompt whole (a retry: cached up to its last block).
struct SharedMix {
  int n = 24, groups = 3, prefix = 40, min_suffix = 1, max_suffix = 24, min_new = 1, max_new = 30;
  int repeat = 5;
  bool sample = false;
};

inline std::vector<serve::Request> make_shared_requests(const SharedMix& m, int V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<std::vector<int32_t>> system(m.groups, std::vector<int32_t>(m.prefix));
  for (auto& s : system)
    for (auto& t : s) t = uni(0, V - 1);
  std::vector<serve::Request> rs(m.n);
  for (int i = 0; i < m.n; i++) {
    auto& r = rs[i];
    if (m.repeat > 0 && i > 0 && i % m.repeat == 0) {
      r.prompt_ids = rs[uni(0, i - 1)].prompt_ids;
    } else {
      r.prompt_ids = system[uni(0, m.groups - 1)];
      for (int k = uni(m.min_suffix, m.max_suffix); k > 0; k--)
        r.prompt_ids.push_back(uni(0, V - 1));
    }
    r.stop.max_new_tokens = uni(m.min_new, m.max_new);
    r.stop.stop_at_eos = false;
    if (m.sample) r.sampling = {.temperature = 0.8f, .top_k = 40, .top_p = 0.9f, .seed = rng()};
  }
  return rs;
}

// Requests whose text repeats, so that speculation's proposals are accepted: a random tiny
// model copies its prompt's loops and falls into loops of its own. Greedy, or seeded at a low
// temperature for half of them.
struct RepeatMix {
  int n = 24, max_motif = 12, max_repeats = 6, max_new = 90;
  bool sample = false;
};

inline std::vector<serve::Request> make_repetitive_requests(const RepeatMix& m, int V,
                                                            uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<serve::Request> rs(m.n);
  for (auto& r : rs) {
    std::vector<int32_t> motif(uni(2, m.max_motif));
    for (auto& t : motif) t = uni(0, V - 1);
    for (int rep = uni(1, m.max_repeats); rep > 0; rep--)
      r.prompt_ids.insert(r.prompt_ids.end(), motif.begin(), motif.end());
    for (int extra = uni(0, 5); extra > 0; extra--) r.prompt_ids.push_back(uni(0, V - 1));
    r.stop.max_new_tokens = uni(1, m.max_new);
    r.stop.stop_at_eos = false;
    if (m.sample)
      r.sampling = {
          .temperature = uni(0, 1) ? 0.05f : 0.9f, .top_k = 40, .top_p = 0.95f, .seed = rng()};
  }
  return rs;
}

// Every token must agree on the host and under emulation: their kernels sum in an order that
// does not depend on the step's rows (kernels/host/matmul.hpp; kernels/common.hpp's K slices
// and attention_state.hpp for the device kernels). A real GPU's tensor cores and compiler are
// not checked here, so the Cuda backend may part at a near-tie.
template <class Model>
constexpr bool kExact = !std::is_same_v<typename Model::Config::Backend, backend::Cuda>;

// The same requests run one by one through generate(), with top-2 logprobs to see near-ties
// where tokens may part (with none where they may not: the logprobs then come from the same
// place as the engine's, so that they can be compared bit for bit).
template <class Model>
std::vector<serve::Result> alone(Model& model, const std::vector<serve::Request>& rs) {
  std::vector<serve::Result> out;
  for (const auto& r : rs) {
    serve::GenerateOptions o{
        .sampling = r.sampling, .stop = r.stop, .top_logprobs = kExact<Model> ? r.top_logprobs : 2};
    out.push_back(serve::generate(model, tokenizer(), r.prompt_ids, o));
  }
  return out;
}

// Checks got == want token for token; returns 1 if they part at a near-tie (allowed unless
// exact), else 0. Exact also means the same logprobs, bit for bit: the same tokens alone would
// let a rounding difference hide wherever no near-tie happens to fall.
inline int check_same(const serve::Result& want, const serve::Result& got, std::size_t i,
                      bool exact) {
  INFO("request " << i << ": prompt " << want.prompt_ids.size() << " tokens");
  CHECK(got.finish_reason == want.finish_reason);
  const auto a = want.ids(), b = got.ids();
  std::size_t k = 0;
  while (k < a.size() && k < b.size() && a[k] == b[k]) k++;
  if (exact) {
    std::size_t differ = 0;
    for (std::size_t t = 0; t < k; t++)  // (a top-logprobs request computes its own)
      differ += want.tokens[t].top.empty() == got.tokens[t].top.empty() &&
                std::bit_cast<uint32_t>(want.tokens[t].logprob) !=
                    std::bit_cast<uint32_t>(got.tokens[t].logprob);
    CHECK(differ == 0);
  }
  if (k == a.size() && k == b.size()) return 0;
  INFO("token " << k << " of " << a.size() << " / " << b.size());
  REQUIRE(k < a.size());
  REQUIRE(k < b.size());
  REQUIRE_FALSE(exact);
  const auto& top = want.tokens[k].top;
  REQUIRE(top.size() == 2);
  // A part is allowed only at a greedy near-tie; a sampled token must always agree.
  CHECK(want.tokens[k].logprob == top[0].logprob);
  CHECK(top[0].logprob - top[1].logprob < kNearTie);
  return 1;
}

// The best k of a row of log-probabilities, as the engine orders them: highest first, ties to
// the lower id.
inline std::vector<serve::TokenLogprob> best(const std::vector<float>& lp, int k) {
  std::vector<int32_t> idx(lp.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return lp[a] > lp[b] || (lp[a] == lp[b] && a < b);
  });
  std::vector<serve::TokenLogprob> out;
  for (int i = 0; i < k; i++) out.push_back({idx[i], lp[idx[i]]});
  return out;
}

// What the prompt gets alone: the whole of it in one forward, every row's logits (Logits::All).
template <class Model>
std::vector<serve::PromptToken> alone_prompt(Model& m, const std::vector<int32_t>& prompt, int k) {
  constexpr int V = Model::V;
  auto cache = m.make_cache(1);
  const int T = static_cast<int>(prompt.size());
  const model::SeqStep step{0, 0, T};
  std::vector<float> logits, lp;
  m.forward(cache, model::Batch{prompt, std::span(&step, 1), model::Logits::All}, logits);
  std::vector<serve::PromptToken> out;
  for (int i = 0; i + 1 < T; i++) {
    serve::log_softmax(std::span<const float>(logits.data() + std::size_t(i) * V, V), lp);
    out.push_back({prompt[i + 1], lp[prompt[i + 1]], best(lp, k)});
  }
  return out;
}

// Exact: the same bits. Otherwise (a GPU, whose head may tile a one-row step and a whole
// prompt differently) within kNearTie, alternatives compared by value where ids may swap.
inline void check_same_prompt(const std::vector<serve::PromptToken>& want,
                              const std::vector<serve::PromptToken>& got, bool exact) {
  REQUIRE(got.size() == want.size());
  auto same = [&](float a, float b) {
    return exact ? std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b)
                 : std::abs(a - b) <= kNearTie;
  };
  int differ = 0;
  for (std::size_t i = 0; i < want.size(); i++) {
    differ += got[i].id != want[i].id || !same(got[i].logprob, want[i].logprob) ||
              got[i].top.size() != want[i].top.size();
    for (std::size_t j = 0; j < want[i].top.size() && j < got[i].top.size(); j++)
      differ += (exact && got[i].top[j].id != want[i].top[j].id) ||
                !same(got[i].top[j].logprob, want[i].top[j].logprob);
  }
  CHECK(differ == 0);
}

template <class Model, class Sched>
serve::EngineStats run_and_compare(Model& model, const std::vector<serve::Request>& rs,
                                   const std::vector<serve::Result>& want, serve::EngineOptions opt,
                                   std::vector<serve::Result>* results = nullptr) {
  serve::Engine<Model, Sched> engine(model, tokenizer(), opt);
  auto got = engine.run_all(rs);
  REQUIRE(got.size() == want.size());
  int parted = 0;
  for (std::size_t i = 0; i < rs.size(); i++) {
    REQUIRE(got[i].error == "");
    parted += check_same(want[i], got[i], i, kExact<Model>);
  }
  // Near-ties are rare: more than a few means a real difference hiding behind the tolerance.
  CHECK(parted <= 2);
  engine.wait_idle();
  auto s = engine.stats();
  CHECK(s.finished == static_cast<long>(rs.size()));
  CHECK(s.slots_free == s.slots);
  CHECK(s.cache_blocks_free == s.cache_blocks);  // cached blocks nobody holds are free
  if (results) *results = std::move(got);
  return s;
}

}  // namespace servekit::test::engine
