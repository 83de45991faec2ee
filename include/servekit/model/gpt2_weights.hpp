// SPDX-License-Identifier: Apache-2.0
#pragma once
// Gpt2Weights<Cfg>: GPT-2's parameters in one composition's weight format and storage, and
// nothing else: no scratch, no step state. Gpt2 (model/gpt2.hpp) runs its forward pass over
// them. Every array lives in the backend's storage (Ops::Vec, Ops::Resident): host vectors for
// Host and Emulated, device memory for Cuda.
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

#include "servekit/backend/host.hpp"
#include "servekit/core/error.hpp"
#include "servekit/model/gpt2_tensors.hpp"
#include "servekit/weights/transposed.hpp"

namespace servekit::model {

template <class Cfg>
struct Gpt2Weights {
  using Dims = typename Cfg::Dims;
  using Ops = backend::Ops<typename Cfg::Backend>;
  using Storage = typename Ops::Storage;
  template <class T>
  using Vec = typename Storage::template Vec<T>;  // std::vector, or a device vector
  using Mat = typename Ops::template Resident<weights::Matrix<typename Cfg::Weights>>;
  static constexpr int L = Dims::n_layer, C = Dims::n_embd, V = Dims::vocab;
  // Every format but f32 keeps a copy of the output projection in the format: it is the
  // largest matrix a step reads (38.6M weights in GPT-2), and wte stays fp32 for the lookup.
  // A backend may ask for the copy in f32 too (Ops::kHeadCopy), when its linear reads a
  // resident matrix faster than its lm_head kernel reads wte.
  static constexpr bool kHeadInFormat =
      !std::is_same_v<typename Cfg::Weights, weights::F32> || backend::CopiesHead<Ops>;

  struct Layer {
    Vec<float> ln_1_w, ln_1_b;  // (C)
    Mat attn;                   // (C, 3C)
    Vec<float> attn_b;          // (3C)
    Mat attn_proj;              // (C, C)
    Vec<float> attn_proj_b;     // (C)
    Vec<float> ln_2_w, ln_2_b;  // (C)
    Mat fc;                     // (C, 4C)
    Vec<float> fc_b;            // (4C)
    Mat mlp_proj;               // (4C, C)
    Vec<float> mlp_proj_b;      // (C)
  };

  float eps;
  bool head_tied;                       // lm_head is wte (GPT-2), not a matrix of its own
  Vec<float> wte, wpe, ln_f_w, ln_f_b;  // (V, C), (P, C), (C), (C)
  Mat head;                             // (C, V) the output projection in the format (not f32)
  Vec<float> head_f32_own;              // (V, C) f32 when not tied to wte; empty: wte is the head
  std::vector<Layer> layers;

  // Host storage moves the tensors in; device storage uploads each one and frees its host
  // copy before the next, so at most one host tensor is held twice (the head: also its
  // transposed fp32 copy, while it is cast to the format).
  explicit Gpt2Weights(Gpt2Tensors t)
      : eps(t.config.layer_norm_epsilon), head_tied(t.lm_head.empty()) {
    auto vec = [](std::vector<float>& v) { return Storage::to_vec(std::exchange(v, {})); };
    using HostMat = weights::Matrix<typename Cfg::Weights>;
    if (!t.lm_head.empty() && t.lm_head.size() != t.wte.size())
      fail("lm_head.weight: ", t.lm_head.size(), " values, wte.weight has ", t.wte.size());
    wpe = vec(t.wpe);
    ln_f_w = vec(t.ln_f_w);
    ln_f_b = vec(t.ln_f_b);
    layers.reserve(L);
    // HF's tensor names, so that a format's load error says which matrix it could not take.
    auto wname = [](int i, const char* m) {
      return servekit::detail::cat("h.", i, ".", m, ".weight");
    };
    auto mat = [&](std::vector<float>& w, int K, int N, int i, const char* m) {
      return Ops::resident(HostMat::from_f32(std::exchange(w, {}), K, N, wname(i, m)));
    };
    int l_i = 0;
    for (auto& s : t.layers) {
      Layer l;
      l.ln_1_w = vec(s.ln_1_w), l.ln_1_b = vec(s.ln_1_b);
      l.attn = mat(s.attn_w, C, 3 * C, l_i, "attn.c_attn");
      l.attn_b = vec(s.attn_b);
      l.attn_proj = mat(s.attn_proj_w, C, C, l_i, "attn.c_proj");
      l.attn_proj_b = vec(s.attn_proj_b);
      l.ln_2_w = vec(s.ln_2_w), l.ln_2_b = vec(s.ln_2_b);
      l.fc = mat(s.fc_w, C, 4 * C, l_i, "mlp.c_fc");
      l.fc_b = vec(s.fc_b);
      l.mlp_proj = mat(s.mlp_proj_w, 4 * C, C, l_i, "mlp.c_proj");
      l.mlp_proj_b = vec(s.mlp_proj_b);
      layers.push_back(std::move(l));
      l_i++;
    }
    if constexpr (kHeadInFormat) {
      // The step's largest matrix, read whole by every step: in the format, as a (C, V) linear,
      // so u8 keeps one (scale, min) per vocabulary row (per output channel) or per group.
      head = Ops::resident(
          HostMat::from_f32(weights::transposed(t.head(), V, C), C, V, "lm_head.weight"));
      t.lm_head = {};
    } else if (!t.lm_head.empty()) {
      head_f32_own = vec(t.lm_head);
    }
    wte = vec(t.wte);
  }

  const Vec<float>& head_f32() const { return head_tied ? wte : head_f32_own; }  // (V, C)

  // Bytes a decode step must read at least once: every weight, lm_head included. With the
  // head in the format, a step reads only its tokens' rows of wte; those are not counted.
  std::size_t bytes() const {
    std::size_t n = (wpe.size() + ln_f_w.size() + ln_f_b.size()) * sizeof(float);
    n += kHeadInFormat ? head.bytes() : head_f32().size() * sizeof(float);
    for (const auto& l : layers)
      n += l.attn.bytes() + l.attn_proj.bytes() + l.fc.bytes() + l.mlp_proj.bytes() +
           (l.ln_1_w.size() * 4 + l.attn_b.size() + C + l.fc_b.size() + C) * sizeof(float);
    return n;
  }
  // The output projection's storage, quantization state included, and that state alone: the
  // format's (C, V) copy, or fp32 (V, C) (wte itself when tied, counted here as 0 bytes).
  std::size_t head_bytes() const {
    if constexpr (kHeadInFormat) return head.bytes();
    return head_f32_own.size() * sizeof(float);
  }
  std::size_t head_state_bytes() const {
    if constexpr (kHeadInFormat) return head.state_bytes();
    return 0;
  }
};

}  // namespace servekit::model
