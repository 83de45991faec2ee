// SPDX-License-Identifier: Apache-2.0
#pragma once
// Quantization error per tensor: what a weight format does to each fp32 matrix, as the
// course's torch.abs(t - t_rev), summarised by its max and mean.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/model/gpt2_tensors.hpp"
#include "servekit/weights/formats.hpp"
#include "servekit/weights/transposed.hpp"

namespace servekit {

struct TensorError {
  std::string name;  // HF's name, e.g. "h.0.attn.c_attn.weight"
  int K = 0, N = 0;
  double max_abs = 0, mean_abs = 0;
  double range = 0;      // max - min of the fp32 tensor: per-tensor u8's step is range / 255
  bool in_model = true;  // false: kept in fp32 by servekit, shown for the course's comparison
};

// |w - w'| of one (K, N) matrix through format F.
template <weights::WeightFormat F>
TensorError tensor_error(const std::vector<float>& w, int K, int N, std::string name) {
  auto m = weights::Matrix<F>::from_f32(w, K, N, name);
  TensorError e{std::move(name), K, N};
  double sum = 0;
  float lo = w.empty() ? 0.f : w[0], hi = lo;
  for (int k = 0; k < K; k++)
    for (int n = 0; n < N; n++) {
      const float x = w[static_cast<std::size_t>(k) * N + n];
      const double d = std::abs(static_cast<double>(x) - m.dequant(k, n));
      e.max_abs = std::max(e.max_abs, d);
      sum += d;
      lo = std::min(lo, x), hi = std::max(hi, x);
    }
  e.mean_abs = w.empty() ? 0 : sum / w.size();
  e.range = static_cast<double>(hi) - lo;
  return e;
}

// Every linear matrix of the model, the output projection as the model stores it (a (C, V)
// linear: wte^T, or the untied lm_head), then wte and wpe as the course would quantize them
// for the input lookup, which servekit keeps in fp32 (as (V, C) and (P, C) tensors; skipped
// when the format's groups do not divide their rows).
template <weights::WeightFormat F>
std::vector<TensorError> quant_report(const model::Gpt2Tensors& t) {
  const int C = t.config.n_embd;
  std::vector<TensorError> r;
  for (std::size_t i = 0; i < t.layers.size(); i++) {
    const auto& l = t.layers[i];
    const std::string p = "h." + std::to_string(i) + ".";
    r.push_back(tensor_error<F>(l.attn_w, C, 3 * C, p + "attn.c_attn.weight"));
    r.push_back(tensor_error<F>(l.attn_proj_w, C, C, p + "attn.c_proj.weight"));
    r.push_back(tensor_error<F>(l.fc_w, C, 4 * C, p + "mlp.c_fc.weight"));
    r.push_back(tensor_error<F>(l.mlp_proj_w, 4 * C, C, p + "mlp.c_proj.weight"));
  }
  const int V = t.config.vocab_size, P = t.config.n_positions;
  r.push_back(tensor_error<F>(weights::transposed(t.head(), V, C), C, V, "lm_head.weight"));
  for (auto [w, rows, name] : {std::tuple{&t.wte, V, "wte.weight"}, {&t.wpe, P, "wpe.weight"}}) {
    try {
      r.push_back(tensor_error<F>(*w, rows, C, name));
      r.back().in_model = false;
    } catch (const Error&) {
      // e.g. Group<64> on wte: 50257 rows are not a multiple of 64.
    }
  }
  return r;
}

}  // namespace servekit
