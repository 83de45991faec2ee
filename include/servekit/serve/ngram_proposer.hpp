// SPDX-License-Identifier: Apache-2.0
#pragma once
// Prompt lookup (n-gram) speculation: a model-free proposer. When the text so far ends with n
// tokens that also occur earlier in the prompt or the generated text, the tokens that followed
// that earlier occurrence are a guess for what follows now (code edits, quotes, summaries and
// repetitive generations copy a lot). The target model verifies up to k of them in one step
// (serve/engine.hpp); a guess costs rows of that step, never a different token.
//
//   tokens:  ... a b c d e ... x y [a b c]      last n = 3 tokens match at the first "a b c"
//   draft:                          d e ...     the k tokens that followed it
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "servekit/core/error.hpp"

namespace servekit::serve {

// When a sequence's proposals ride in a step: `cost` when they lower the step's time per token,
// by the engine's measured step cost (serve/step_cost.hpp; off at batch sizes where a row costs
// more than its expected tokens save); `always` (a test's or a benchmark's fixed choice).
enum class SpecRule { cost, always };

class Drafter;  // serve/draft_model.hpp

// EngineOptions::speculative. k = 0: no speculation.
struct Speculation {
  int k = 0;          // proposed tokens per sequence and step at most
  int ngram_max = 3;  // the longest suffix looked up first...
  int ngram_min = 1;  // ...down to this one
  SpecRule rule = SpecRule::cost;
  // A draft model proposes instead of the n-gram lookup (serve/draft_model.hpp); one engine's.
  std::shared_ptr<Drafter> draft;

  bool on() const { return k > 0; }
  void validate() const {
    if (k < 0 || k > 64) fail("engine: speculative k must be in [0, 64] (0: off), got ", k);
    if (!on()) return;
    if (ngram_min < 1 || ngram_max < ngram_min)
      fail("engine: speculative n-gram sizes must satisfy 1 <= ngram_min <= ngram_max, got ",
           ngram_min, " and ", ngram_max);
  }
};

// How many tokens one sequence proposes, adapted to how its proposals fare: a rejected token
// costs a row of the step for nothing. After a verify that accepted everything it grows by
// one (up to k); after a rejection it becomes what was accepted + 1; after kPatience verifies
// in a row that accepted nothing it pauses for 2, 4, ... 64 of its decode steps, then tries
// one token again. `rate` follows the share of its proposed tokens accepted (an average over
// its last few verifies), which the cost rule weighs against what a row costs. A sequence the
// rule keeps out regains hope a little each time (declined()), so it tries again after a few
// steps where rows are cheap and after more where they are dear: text that did not repeat a
// while ago may loop now.
struct SpecPace {
  static constexpr int kPatience = 4, kMaxPause = 64;
  static constexpr float kRateWeight = 0.3f;  // of the latest verify in `rate`
  static constexpr float kRegain = 0.1f;      // of the way back to 1, per step declined
  int k = -1;  // tokens it may propose next (-1: not yet set: the engine's k)
  int misses = 0, pause = 0, backoff = 2;
  float rate = 1;  // untried: hopeful, so that every sequence tries once

  // The tokens it may propose this step (0: paused).
  int allowance(int k_max) {
    if (k < 0) k = k_max;
    if (pause > 0) {
      pause--;
      return 0;
    }
    return std::min(k, k_max);
  }
  void declined() { rate += kRegain * (1 - rate); }
  void verified(int proposed, int accepted, int k_max) {
    if (proposed > 0)
      rate += kRateWeight * (static_cast<float>(accepted) / static_cast<float>(proposed) - rate);
    if (accepted == proposed) {
      k = std::min(k_max, k + 1), misses = 0, backoff = 2;
      return;
    }
    k = std::max(1, accepted + 1);
    if (accepted > 0) {
      misses = 0, backoff = 2;
    } else if (++misses >= kPatience) {
      pause = backoff, backoff = std::min(kMaxPause, 2 * backoff), misses = 0;
    }
  }
};

// Writes to `out` (cleared first) `k` tokens that continue the most recent earlier occurrence
// of tokens' last n tokens, for n from ngram_max down to ngram_min; empty when no suffix
// recurs. The text is copied from `shift` tokens back, the distance to that occurrence, and the
// copy runs on into its own proposals: a loop of period 2 ("a b a b") proposes "a b a b ...",
// not just the two tokens the text has after the match. O(len * n) per call: a step's other
// work dwarfs it at GPT-2's context sizes.
inline void propose_ngram(std::span<const int32_t> tokens, const Speculation& s, int k,
                          std::vector<int32_t>& out) {
  out.clear();
  const int len = static_cast<int>(tokens.size());
  if (k <= 0) return;
  for (int n = std::min(s.ngram_max, len - 1); n >= s.ngram_min; n--) {
    const auto suffix = tokens.last(static_cast<std::size_t>(n));
    // Latest start first: recent text predicts the continuation best, and the shortest shift
    // is a loop's period.
    for (int start = len - n - 1; start >= 0; start--) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
      const int shift = len - n - start;  // >= 1
      for (int i = 0; i < k; i++) {
        const int from = len + i - shift;
        out.push_back(from < len ? tokens[from] : out[from - len]);
      }
      return;
    }
  }
}

}  // namespace servekit::serve
