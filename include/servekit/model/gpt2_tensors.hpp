// SPDX-License-Identifier: Apache-2.0
#pragma once
// All GPT-2 weights as fp32 host arrays, in Hugging Face's layout. HF's GPT-2 uses Conv1D, whose
// weight is (in, out) -- the transpose of nn.Linear -- and that layout is kept: y = x @ W + b.
// Weight formats (fp16, bf16, uint8) are made from this copy.
#include <cstdint>
#include <vector>

#include "servekit/model/hf_config.hpp"

namespace servekit::model {

struct Gpt2LayerTensors {                       // C = n_embd
  std::vector<float> ln_1_w, ln_1_b;            // (C)
  std::vector<float> attn_w, attn_b;            // (C, 3C), (3C)  c_attn: q, k, v along out
  std::vector<float> attn_proj_w, attn_proj_b;  // (C, C), (C)
  std::vector<float> ln_2_w, ln_2_b;            // (C)
  std::vector<float> fc_w, fc_b;                // (C, 4C), (4C)
  std::vector<float> mlp_proj_w, mlp_proj_b;    // (4C, C), (C)
};

struct Gpt2Tensors {
  Gpt2HfConfig config;
  std::vector<float> wte;  // (V, C)  also the tied lm_head
  // (V, C) an output projection of its own; empty: lm_head is tied to wte, as in GPT-2.
  std::vector<float> lm_head;
  // (V, C) the output projection, whichever of the two holds it.
  const std::vector<float>& head() const { return lm_head.empty() ? wte : lm_head; }
  std::vector<float> wpe;  // (P, C)
  std::vector<Gpt2LayerTensors> layers;
  std::vector<float> ln_f_w, ln_f_b;  // (C)

  int64_t num_params() const {
    int64_t n = int64_t(wte.size() + lm_head.size() + wpe.size() + ln_f_w.size() + ln_f_b.size());
    for (const Gpt2LayerTensors& l : layers)
      for (const std::vector<float>* t :
           {&l.ln_1_w, &l.ln_1_b, &l.attn_w, &l.attn_b, &l.attn_proj_w, &l.attn_proj_b, &l.ln_2_w,
            &l.ln_2_b, &l.fc_w, &l.fc_b, &l.mlp_proj_w, &l.mlp_proj_b})
        n += int64_t(t->size());
    return n;
  }
};

}  // namespace servekit::model
