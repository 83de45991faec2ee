// SPDX-License-Identifier: Apache-2.0
#pragma once
// Shared by the KV-cache tests: fixture paths, (dims, kv layout) pairs, greedy loops.
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "servekit/model/gpt2.hpp"
#include "servekit/serve/sampling.hpp"

#include "support/reference.hpp"

namespace servekit::test {

template <class D, class K, class W = weights::F32>
struct Combo {
  using Dims = D;
  using Kv = K;
  using Model = Gpt2<Config<D, W, K>>;
};

inline std::span<const float> row(const std::vector<float>& m, int r, int V) {
  return std::span(m).subspan(static_cast<std::size_t>(r) * V, V);
}

// Greedy continuation of one prompt alone in a fresh one-slot cache of the same layout.
template <class Model>
std::vector<int32_t> greedy_alone(Model& model, const std::vector<int32_t>& prompt, int n) {
  auto cache = model.make_cache(1, static_cast<int>(prompt.size()) + n);
  std::vector<float> logits;
  std::vector<int32_t> out;
  model::SeqStep s{0, 0, static_cast<int32_t>(prompt.size())};
  model.forward(cache, {prompt, std::span(&s, 1), model::Logits::Last}, logits);
  out.push_back(serve::argmax(logits));
  for (int i = 1; i < n; i++) {
    model::SeqStep d{0, static_cast<int32_t>(prompt.size()) + i - 1, 1};
    model.forward(cache, {std::span(&out.back(), 1), std::span(&d, 1), model::Logits::Last},
                  logits);
    out.push_back(serve::argmax(logits));
  }
  return out;
}

}  // namespace servekit::test
