// SPDX-License-Identifier: Apache-2.0
#pragma once
// Seeded random LoRA adapters for tests, benchmarks and demos without trained ones. The
// matrices are N(0, stddev); a trained adapter's B starts at zero, so a random one moves the
// logits far more than a real one would, which is what a test that must see the delta wants.
#include <array>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "servekit/lora/adapter.hpp"
#include "servekit/core/dims.hpp"

namespace servekit::lora {

struct RandomAdapterSpec {
  std::string name;
  int rank = 8;
  float alpha = 16;
  float stddev = 0.02f;
  std::array<bool, kTargets> targets{true, true, true, true};
  double layer_share = 1.0;  // chance that a targeted linear of a layer is adapted
};

template <dims::ModelDims D>
Adapter random_adapter(const RandomAdapterSpec& s, std::mt19937_64& rng) {
  if (s.rank < 1) fail("random_adapter: rank must be >= 1, got ", s.rank);
  std::normal_distribution<float> g(0.f, s.stddev);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Adapter a;
  a.name = s.name;
  a.rank = s.rank;
  a.alpha = s.alpha;
  a.scale = s.alpha / s.rank;
  a.targets = s.targets;
  a.layers.resize(D::n_layer);
  auto fill = [&](int l, int t) {
    const auto [in, out] = target_shape(static_cast<Target>(t), D::n_embd);
    LoraPair p{s.rank, in, out, std::vector<float>(std::size_t(s.rank) * in),
               std::vector<float>(std::size_t(out) * s.rank)};
    for (auto& v : p.a) v = g(rng);
    for (auto& v : p.b) v = g(rng);
    a.layers[l][t] = std::move(p);
  };
  bool any = false;
  for (int l = 0; l < D::n_layer; l++)
    for (int t = 0; t < kTargets; t++)
      if (s.targets[t] && u(rng) < s.layer_share) fill(l, t), any = true;
  // Never empty: layer 0 of the first target stands in when the draw kept nothing.
  for (int t = 0; t < kTargets && !any; t++)
    if (s.targets[t]) fill(0, t), any = true;
  if (!any) fail("random_adapter: spec '", s.name, "' targets no linear");
  return a;
}

}  // namespace servekit::lora
