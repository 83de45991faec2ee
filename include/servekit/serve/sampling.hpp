// SPDX-License-Identifier: Apache-2.0
#pragma once
// Next-token selection on the host: greedy, or sampling with HF's warper order (temperature,
// then top-k, then top-p). The random number of a request's n-th generated token is
// sample_uniform(seed, n) (core/philox.hpp), the same draw the device kernel makes, walked
// over the kept tokens in the same (vocabulary) order, so a seeded request gets the same tokens
// whatever else shares its steps and after a preemption, and host and device agree unless the
// draw falls within rounding of a boundary. Not bit-compatible with torch's RNG.
//
// NaN logits are never chosen (they count as -inf, as in the device kernel); a row with no
// finite logit is an error, never a silent pick. Probabilities are exp((l - max) / T) in
// double, so a tiny temperature leaves the argmax with all the mass instead of inf - inf.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/core/philox.hpp"

namespace servekit::serve {

struct SamplingParams {
  float temperature = 0.f;  // 0: greedy (argmax), as in vLLM; else > 0
  int top_k = 0;            // 0: off
  float top_p = 1.f;        // (0, 1]; 1: off
  uint64_t seed = 0;        // the request's random stream

  bool greedy() const { return temperature == 0.f; }
  void validate() const {
    if (!(temperature >= 0.f) || std::isinf(temperature))
      fail("sampling: temperature must be >= 0 and finite (0: greedy), got ", temperature);
    if (top_k < 0) fail("sampling: top_k must be >= 0 (0: off), got ", top_k);
    if (!(top_p > 0.f && top_p <= 1.f)) fail("sampling: top_p must be in (0, 1], got ", top_p);
  }
};

// The largest finite-or-inf logit, ties to the lowest index; NaNs skipped. -1 if none is a
// number above -inf.
inline int32_t argmax_or_none(std::span<const float> logits) {
  int32_t best = -1;
  for (std::size_t i = 0; i < logits.size(); i++) {
    const float v = logits[i];
    if (v != v || v == -INFINITY) continue;
    if (best < 0 || v > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

inline int32_t argmax(std::span<const float> logits) {
  const int32_t i = argmax_or_none(logits);
  if (i < 0) fail("sampling: every one of the ", logits.size(), " logits is NaN or -inf");
  return i;
}

// log_softmax(logits)[i] for every i (NaN stays NaN).
inline void log_softmax(std::span<const float> logits, std::vector<float>& out) {
  const float m = logits[argmax(logits)];
  double sum = 0;
  for (float v : logits)
    if (v == v) sum += std::exp(static_cast<double>(v) - m);
  const float lse = m + static_cast<float>(std::log(sum));
  out.resize(logits.size());
  for (std::size_t i = 0; i < logits.size(); i++) out[i] = logits[i] - lse;
}

// log_softmax(logits)[id] alone, the same bits: one pass, no (V) buffer. (So a token drawn by
// the host has the log-probability the same text gets scored as a prompt.)
inline float logprob_of(std::span<const float> logits, int32_t id) {
  const float m = logits[argmax(logits)];
  double sum = 0;
  for (float v : logits)
    if (v == v) sum += std::exp(static_cast<double>(v) - m);
  const float lse = m + static_cast<float>(std::log(sum));
  return logits[id] - lse;
}

// Holds only scratch: one Sampler serves every request of an engine.
class Sampler {
 public:
  // The token for draw number `index` of the stream p.seed.
  int32_t operator()(std::span<const float> logits, const SamplingParams& p, uint64_t index) {
    const int32_t best = argmax(logits);
    if (p.greedy() || logits[best] == INFINITY) return best;  // +inf takes all the mass
    const int V = static_cast<int>(logits.size());
    // Candidates (numbers above -inf) sorted by logit, best first, ties by index; top-k and
    // top-p only ever cut this list's tail.
    idx_.clear();
    for (int i = 0; i < V; i++)
      if (logits[i] == logits[i] && logits[i] != -INFINITY) idx_.push_back(i);
    auto better = [&](int a, int b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    const int n = static_cast<int>(idx_.size());
    int keep = n;
    if (p.top_k > 0 && p.top_k < n) {
      std::partial_sort(idx_.begin(), idx_.begin() + p.top_k, idx_.end(), better);
      // Ties with the k-th value survive, as in HF's TopKLogitsWarper.
      const float kth = logits[idx_[p.top_k - 1]];
      keep = p.top_k;
      std::sort(idx_.begin() + keep, idx_.end(), better);
      while (keep < n && logits[idx_[keep]] == kth) keep++;
    } else {
      std::sort(idx_.begin(), idx_.end(), better);
    }
    prob_.resize(keep);
    const double m = logits[best];
    double sum = 0;
    for (int i = 0; i < keep; i++)
      sum += prob_[i] = std::exp((static_cast<double>(logits[idx_[i]]) - m) / p.temperature);
    if (p.top_p < 1.f) {
      // Keep the smallest prefix whose mass reaches top_p (at least one token), and the ties of
      // its last logit, as the device kernel does.
      double cum = 0;
      int k = 0;
      while (k < keep) {
        cum += prob_[k++];
        if (cum >= p.top_p * sum) break;
      }
      while (k < keep && logits[idx_[k]] == logits[idx_[k - 1]]) cum += prob_[k++];
      keep = k;
      sum = cum;
    }
    // The draw walks the kept tokens in vocabulary order, as the device kernel does, so that the
    // two pick the same token from the same uniform whenever their logits agree.
    // sum >= 1: the best candidate has weight exp(0) = 1, so the draw is always defined.
    weight_.assign(V, 0.0);
    for (int i = 0; i < keep; i++) weight_[idx_[i]] = prob_[i];
    const double r = static_cast<double>(sample_uniform(p.seed, index)) * sum;
    double cum = 0;
    int last = best;
    for (int v = 0; v < V; v++) {
      if (weight_[v] == 0) continue;
      cum += weight_[v];
      if (r < cum) return v;
      last = v;
    }
    return last;  // rounding at the very top of the range: the last kept token
  }

 private:
  std::vector<int> idx_;
  std::vector<double> prob_;
  std::vector<double> weight_;  // (V) the kept tokens' weights in vocabulary order
};

}  // namespace servekit::serve
