// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the speculation benchmarks (bench/speculative.cpp, bench/speculative_draft.cpp) share:
// their requests, one engine run measured over its decode part, and the expected tokens per
// verify at an acceptance rate.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common.hpp"
#include "servekit/core/error.hpp"
#include "servekit/serve/engine.hpp"

namespace servekit::bench {

// `batch` requests whose prompts (`prompt` tokens) repeat a motif of 8-31 random tokens, each
// generating `new_tokens` at temperature T (seeded, top-k 50).
inline std::vector<serve::Request> motif_requests(int prompt, int new_tokens, int batch, float T) {
  std::mt19937_64 rng(7 + batch);
  std::vector<serve::Request> rs(batch);
  for (auto& r : rs) {
    std::vector<int32_t> motif(8 + rng() % 24);
    for (auto& t : motif) t = static_cast<int32_t>(rng() % 50000);
    while (static_cast<int>(r.prompt_ids.size()) < prompt)
      r.prompt_ids.insert(r.prompt_ids.end(), motif.begin(), motif.end());
    r.prompt_ids.resize(prompt);
    r.stop = {.max_new_tokens = new_tokens, .stop_at_eos = false};
    r.sampling = {.temperature = T, .top_k = 50, .seed = rng()};
  }
  return rs;
}

struct Measured {
  double seconds = 0;  // decoding: from the last first token to the end
  long generated = 0, proposed = 0, accepted = 0, declined = 0, verifies = 0;
  void add(const Measured& x) {
    seconds += x.seconds, generated += x.generated;
    proposed += x.proposed, accepted += x.accepted;
    declined += x.declined, verifies += x.verifies;
  }
  double rate() const { return generated / seconds; }
  double acceptance() const { return proposed > 0 ? double(accepted) / proposed : 0; }
};

// rs through a fresh engine, all at once (one prefill step for every prompt). Only the decode
// part counts: the tokens after each request's first, over the time after the last first token.
template <class Model>
Measured run_engine(Model& m, const text::Gpt2Tokenizer& tok, const std::vector<serve::Request>& rs,
                    const serve::Speculation& sp) {
  serve::EngineOptions o{.max_batch = static_cast<int>(rs.size()),
                         .max_batched_tokens = 4096,
                         .memory_limit = std::size_t{4} << 30,
                         .speculative = sp};
  serve::Engine<Model, serve::sched::Continuous> e(m, tok, o);
  const double t0 = now_s();
  const auto results = e.run_all(rs);
  const double wall = now_s() - t0;
  Measured x;
  double first = 0;
  for (const auto& r : results) {
    if (!r.error.empty()) fail("a request failed: ", r.error);
    first = std::max(first, r.metrics.ttft_ms / 1e3);
    x.generated += static_cast<long>(r.tokens.size()) - 1;
  }
  x.seconds = wall - first;
  const auto s = e.stats();
  x.proposed = s.spec_proposed, x.accepted = s.spec_accepted;
  x.declined = s.spec_declined, x.verifies = s.spec_verifies;
  return x;
}

// Tokens per verify step when each of k proposals is accepted with probability a (while the
// ones before it were): (1 - a^(k+1)) / (1 - a).
inline double expected_tokens(double a, int k) {
  return a >= 1 ? k + 1 : (1 - std::pow(a, k + 1)) / (1 - a);
}

}  // namespace servekit::bench
