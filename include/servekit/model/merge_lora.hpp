// SPDX-License-Identifier: Apache-2.0
#pragma once
// Merging one adapter into the base weights: W' = W + scale * A^T B^T for every adapted linear,
// done on the fp32 tensors before a weight format or backend takes them, so a merged model
// runs at the base model's speed on every backend and format (lesson 5's "merged" mode).
//
// Floating-point addition cannot be undone exactly (W + d - d != W in general), so merge()
// hands back the original values of every matrix it changed, and unmerge() puts those back:
// the base weights come back bit for bit.
#include <utility>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/lora/adapter.hpp"
#include "servekit/model/gpt2_tensors.hpp"

namespace servekit::lora {

// What merge() replaced: (layer, target, original (in, out) matrix).
struct MergeUndo {
  struct Saved {
    int layer;
    Target target;
    std::vector<float> w;
  };
  std::vector<Saved> saved;
};

namespace detail {
inline std::vector<float>& target_weight(model::Gpt2LayerTensors& l, Target t) {
  switch (t) {
    case Target::Attn:
      return l.attn_w;
    case Target::AttnProj:
      return l.attn_proj_w;
    case Target::Fc:
      return l.fc_w;
    case Target::MlpProj:
      return l.mlp_proj_w;
  }
  return l.attn_w;
}
}  // namespace detail

// W (in, out) += scale * A^T B^T, i.e. W[k][n] += scale * sum_r A[r][k] B[n][r].
inline void add_delta(float* W,  // (in, out)
                      const LoraPair& p, float scale) {
  const int R = p.rank, K = p.in, N = p.out;
  std::vector<float> bt(static_cast<std::size_t>(R) * N);  // B^T: (R, N), rows contiguous
  for (int n = 0; n < N; n++)
    for (int r = 0; r < R; r++)
      bt[static_cast<std::size_t>(r) * N + n] = p.b[static_cast<std::size_t>(n) * R + r];
#pragma omp parallel for schedule(static)
  for (int k = 0; k < K; k++) {
    float* w = W + static_cast<std::size_t>(k) * N;
    for (int r = 0; r < R; r++) {
      const float a = scale * p.a[static_cast<std::size_t>(r) * K + k];
      const float* b = bt.data() + static_cast<std::size_t>(r) * N;
      for (int n = 0; n < N; n++) w[n] += a * b[n];
    }
  }
}

inline MergeUndo merge(model::Gpt2Tensors& t, const Adapter& ad) {
  if (ad.layers.size() != t.layers.size())
    fail("lora merge: adapter '", ad.name, "' has ", ad.layers.size(), " layers, the model has ",
         t.layers.size());
  MergeUndo undo;
  for (int l = 0; l < static_cast<int>(t.layers.size()); l++)
    for (int i = 0; i < kTargets; i++) {
      const auto tgt = static_cast<Target>(i);
      const LoraPair* p = ad.find(l, tgt);
      if (!p) continue;
      auto& w = detail::target_weight(t.layers[l], tgt);
      if (w.size() != static_cast<std::size_t>(p->in) * p->out)
        fail("lora merge: adapter '", ad.name, "' layer ", l, " ", kTargetNames[i], " is ", p->in,
             " x ", p->out, ", the model's weight holds ", w.size(), " values");
      undo.saved.push_back({l, tgt, w});
      add_delta(w.data(), *p, ad.scale);
    }
  return undo;
}

inline void unmerge(model::Gpt2Tensors& t, MergeUndo&& undo) {
  for (auto& s : undo.saved) detail::target_weight(t.layers.at(s.layer), s.target) = std::move(s.w);
  undo.saved.clear();
}

}  // namespace servekit::lora
