// SPDX-License-Identifier: Apache-2.0
#pragma once
// Memory footprint of a decoder: its weights by group, the quantization state, the KV cache.
//
// servekit keeps the embedding tables wte (V, C) and wpe (P, C) in fp32 whatever the format
// (the input lookup reads a few rows per step). The output projection, tied to wte in GPT-2,
// is read whole by every step, so every format but f32 keeps a copy of it in the format (and
// f32 too on the host backend, a packed copy): the "lm_head" line. See docs/04_quantization.md.
// The course instead quantizes every parameter and reports HF's get_memory_footprint(), which
// counts every parameter in its storage dtype plus the module buffers. course_bytes()
// reproduces that number, so the two can be printed side by side.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>

#include "servekit/weights/formats.hpp"

namespace servekit {

// Bytes per weight of a format's storage, quantization state excluded.
template <class F>
constexpr std::size_t format_elem_bytes() {
  return sizeof(typename weights::Traits<F>::Element);
}

struct Footprint {
  std::string composition;
  std::size_t embeddings = 0;    // wte + wpe, fp32
  std::size_t linear = 0;        // the 4 L linear matrices in the format, state excluded
  std::size_t lm_head = 0;       // the output projection's copy in the format, state excluded
  std::size_t quant_state = 0;   // the scales and zero points of both
  std::size_t norms_biases = 0;  // layernorm weights and biases, linear biases (fp32)
  std::size_t kv_cache = 0;
  int64_t params = 0;          // parameters, the tied lm_head counted once (as HF does)
  int64_t linear_params = 0;   // of which in linear matrices
  std::size_t elem_bytes = 4;  // bytes per weight of the format
  // HF's GPT2Attention buffers in the transformers version the course used: a bool causal
  // mask (1, 1, P, P) and an fp32 masked_bias scalar per layer. servekit keeps neither.
  std::size_t hf_buffers = 0;

  std::size_t weights() const { return embeddings + linear + lm_head + quant_state + norms_biases; }
  std::size_t total() const { return weights() + kv_cache; }
  // get_memory_footprint() of HF's model with every parameter in the format (the course's
  // quantize_model, whose (scale, zero_point) states live outside the model).
  std::size_t course_bytes() const { return params * elem_bytes + hf_buffers; }

  void print(std::FILE* f = stdout) const {
    auto mib = [](std::size_t b) { return b / 1048576.0; };
    std::fprintf(f, "footprint of %s\n", composition.c_str());
    std::fprintf(f, "  %-34s %10.2f MiB\n", "embeddings wte + wpe (fp32)", mib(embeddings));
    std::fprintf(f, "  %-34s %10.2f MiB  (%lld weights, %zu B each)\n", "linear matrices",
                 mib(linear), static_cast<long long>(linear_params), elem_bytes);
    std::fprintf(f, "  %-34s %10.2f MiB\n", "lm_head copy (in the format)", mib(lm_head));
    std::fprintf(f, "  %-34s %10.2f MiB\n", "quantization state (scale, min)", mib(quant_state));
    std::fprintf(f, "  %-34s %10.2f MiB\n", "layernorms and biases (fp32)", mib(norms_biases));
    std::fprintf(f, "  %-34s %10.2f MiB\n", "weights", mib(weights()));
    std::fprintf(f, "  %-34s %10.2f MiB\n", "KV cache", mib(kv_cache));
    std::fprintf(f, "  %-34s %10.2f MiB\n", "total", mib(total()));
  }
};

// Footprint of a Gpt2<Cfg> and, when given, its cache (any KV layout: its bytes()).
template <class Model>
Footprint footprint(const Model& m, const typename Model::Cache* cache = nullptr) {
  constexpr int C = Model::C, L = Model::L, P = Model::P;
  Footprint f;
  f.composition = Model::name();
  f.elem_bytes = format_elem_bytes<typename Model::Config::Weights>();
  f.embeddings = (m.wte().size() + m.wpe().size()) * sizeof(float);
  std::size_t small = 2 * C;  // ln_f
  for (const auto& l : m.layers()) {
    for (const auto* w : {&l.attn, &l.attn_proj, &l.fc, &l.mlp_proj}) {
      f.linear += w->bytes() - w->state_bytes();
      f.quant_state += w->state_bytes();
      f.linear_params += static_cast<int64_t>(w->rows) * w->cols;
    }
    for (const auto* v : {&l.ln_1_w, &l.ln_1_b, &l.attn_b, &l.attn_proj_b, &l.ln_2_w, &l.ln_2_b,
                          &l.fc_b, &l.mlp_proj_b})
      small += v->size();
  }
  f.lm_head = m.head_bytes() - m.head_state_bytes();
  f.quant_state += m.head_state_bytes();
  f.norms_biases = small * sizeof(float);
  // A copy of the tied head is not a parameter of its own; an untied head is, as in HF.
  f.params = static_cast<int64_t>(m.wte().size() + m.wpe().size() + small) + f.linear_params +
             (m.head_tied() ? 0 : int64_t{Model::V} * C);
  f.hf_buffers = static_cast<std::size_t>(L) * (static_cast<std::size_t>(P) * P + sizeof(float));
  if (cache) f.kv_cache = cache->bytes();
  return f;
}

}  // namespace servekit
