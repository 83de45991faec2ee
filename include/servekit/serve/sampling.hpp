// SPDX-License-Identifier: Apache-2.0
#pragma once
// Next-token selection: greedy, or sampling with HF's warper order (temperature, then top-k,
// then top-p). Seeded, so a run can be reproduced; not bit-compatible with torch's RNG.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "servekit/core/error.hpp"

namespace servekit::serve {

struct SamplingParams {
  bool greedy = true;
  float temperature = 1.f;  // > 0
  int top_k = 0;            // 0: off
  float top_p = 1.f;        // (0, 1]; 1: off
  uint64_t seed = 0;

  void validate() const {
    if (greedy) return;
    if (!(temperature > 0.f)) fail("sampling: temperature must be > 0, got ", temperature);
    if (top_k < 0) fail("sampling: top_k must be >= 0, got ", top_k);
    if (!(top_p > 0.f && top_p <= 1.f)) fail("sampling: top_p must be in (0, 1], got ", top_p);
  }
};

inline int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// log_softmax(logits)[i] for every i.
inline void log_softmax(std::span<const float> logits, std::vector<float>& out) {
  const float m = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v - m));
  const float lse = m + static_cast<float>(std::log(sum));
  out.resize(logits.size());
  for (std::size_t i = 0; i < logits.size(); i++) out[i] = logits[i] - lse;
}

class Sampler {
 public:
  explicit Sampler(SamplingParams p) : p_(p), rng_(p.seed) { p_.validate(); }

  int32_t operator()(std::span<const float> logits) {
    if (p_.greedy) return argmax(logits);
    const int V = static_cast<int>(logits.size());
    // Candidates sorted by logit, best first; top-k and top-p only ever cut this list's tail.
    idx_.resize(V);
    std::iota(idx_.begin(), idx_.end(), 0);
    int keep = V;
    if (p_.top_k > 0 && p_.top_k < V) {
      std::partial_sort(idx_.begin(), idx_.begin() + p_.top_k, idx_.end(),
                        [&](int a, int b) { return logits[a] > logits[b]; });
      // Ties with the k-th value survive, as in HF's TopKLogitsWarper.
      const float kth = logits[idx_[p_.top_k - 1]];
      keep = p_.top_k;
      std::sort(idx_.begin() + keep, idx_.end(),
                [&](int a, int b) { return logits[a] > logits[b]; });
      while (keep < V && logits[idx_[keep]] == kth) keep++;
    } else {
      std::sort(idx_.begin(), idx_.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    }
    prob_.resize(keep);
    const float m = logits[idx_[0]] / p_.temperature;
    double sum = 0;
    for (int i = 0; i < keep; i++) sum += prob_[i] = std::exp(logits[idx_[i]] / p_.temperature - m);
    for (int i = 0; i < keep; i++) prob_[i] = static_cast<float>(prob_[i] / sum);
    if (p_.top_p < 1.f) {
      // Keep the smallest prefix whose mass reaches top_p (at least one token).
      double cum = 0;
      int n = 0;
      while (n < keep) {
        cum += prob_[n++];
        if (cum >= p_.top_p) break;
      }
      keep = n;
      double s = 0;
      for (int i = 0; i < keep; i++) s += prob_[i];
      for (int i = 0; i < keep; i++) prob_[i] = static_cast<float>(prob_[i] / s);
    }
    std::uniform_real_distribution<double> u(0.0, 1.0);
    double r = u(rng_), cum = 0;
    for (int i = 0; i < keep; i++) {
      cum += prob_[i];
      if (r < cum) return idx_[i];
    }
    return idx_[keep - 1];
  }

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<int> idx_;
  std::vector<float> prob_;
};

}  // namespace servekit::serve
