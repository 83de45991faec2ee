// SPDX-License-Identifier: Apache-2.0
#pragma once
// Gpt2<Config>: the GPT-2 decoder for one composition of policies. It owns weights and
// scratch space only; sequences live in a cache the caller owns, and requests live above, in
// serve/. One forward() serves prefill, decode, mixed batches and the no-cache recompute.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <utility>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/backend/host.hpp"
#include "servekit/kv/contiguous_cache.hpp"
#include "servekit/model/batch.hpp"
#include "servekit/model/config.hpp"
#include "servekit/model/gpt2_tensors.hpp"
#include "servekit/model/load_gpt2.hpp"

namespace servekit {

template <class Cfg>
class Gpt2 {
  static_assert(std::is_same_v<typename Cfg::Kv, kv::Contiguous>,
                "servekit: Gpt2 supports kv::Contiguous only in this version");

 public:
  using Config = Cfg;
  using Dims = typename Cfg::Dims;
  using Mat = weights::Matrix<typename Cfg::Weights>;
  using Cache = kv::ContiguousCache;
  using Ops = backend::Ops<typename Cfg::Backend>;
  static constexpr int L = Dims::n_layer, C = Dims::n_embd, H = Dims::n_head;
  static constexpr int V = Dims::vocab, P = Dims::n_positions;

  struct Layer {
    std::vector<float> ln_1_w, ln_1_b;  // (C)
    Mat attn;                           // (C, 3C)
    std::vector<float> attn_b;          // (3C)
    Mat attn_proj;                      // (C, C)
    std::vector<float> attn_proj_b;     // (C)
    std::vector<float> ln_2_w, ln_2_b;  // (C)
    Mat fc;                             // (C, 4C)
    std::vector<float> fc_b;            // (4C)
    Mat mlp_proj;                       // (4C, C)
    std::vector<float> mlp_proj_b;      // (C)
  };

  explicit Gpt2(model::Gpt2Tensors t) : eps_(t.config.layer_norm_epsilon) {
    wte_ = std::move(t.wte);
    wpe_ = std::move(t.wpe);
    ln_f_w_ = std::move(t.ln_f_w);
    ln_f_b_ = std::move(t.ln_f_b);
    layers_.reserve(L);
    // HF's tensor names, so that a format's load error says which matrix it could not take.
    auto wname = [](int i, const char* m) { return detail::cat("h.", i, ".", m, ".weight"); };
    int l_i = 0;
    for (auto& s : t.layers) {
      Layer l;
      l.ln_1_w = std::move(s.ln_1_w), l.ln_1_b = std::move(s.ln_1_b);
      l.attn = Mat::from_f32(std::move(s.attn_w), C, 3 * C, wname(l_i, "attn.c_attn"));
      l.attn_b = std::move(s.attn_b);
      l.attn_proj = Mat::from_f32(std::move(s.attn_proj_w), C, C, wname(l_i, "attn.c_proj"));
      l.attn_proj_b = std::move(s.attn_proj_b);
      l.ln_2_w = std::move(s.ln_2_w), l.ln_2_b = std::move(s.ln_2_b);
      l.fc = Mat::from_f32(std::move(s.fc_w), C, 4 * C, wname(l_i, "mlp.c_fc"));
      l.fc_b = std::move(s.fc_b);
      l.mlp_proj = Mat::from_f32(std::move(s.mlp_proj_w), 4 * C, C, wname(l_i, "mlp.c_proj"));
      l.mlp_proj_b = std::move(s.mlp_proj_b);
      layers_.push_back(std::move(l));
      l_i++;
    }
  }

  // HF layout: dir/config.json + dir/model.safetensors, checked against Dims.
  static Gpt2 load(const std::filesystem::path& dir) { return Gpt2(model::load_gpt2<Dims>(dir)); }
  // Seeded random weights with HF's initialisation: for demos and benchmarks without a
  // checkpoint. Its text is meaningless.
  static Gpt2 random(uint64_t seed) { return Gpt2(model::random_gpt2<Dims>(seed)); }

  Cache make_cache(int slots, int max_len = P) const {
    if (max_len > P)
      fail("kv cache: max_len ", max_len, " exceeds n_positions ", P, " of ", Dims::name);
    return Cache(L, C, slots, max_len);
  }

  // Runs one step. logits: (S, V) for Logits::Last, (N, V) for Logits::All.
  void forward(Cache& cache, const model::Batch& b, std::vector<float>& logits) {
    const int N = validate(cache, b);
    const int S = static_cast<int>(b.seqs.size());
    resize(N);
    int r = 0;
    for (const auto& s : b.seqs)
      for (int i = 0; i < s.n_new; i++, r++) slot_[r] = s.slot, pos_[r] = s.n_past + i;

    using E = typename Ops::Epilogue;
    float* x = x_.data();  // (N, C) residual stream
    Ops::embedding(x, b.tokens.data(), pos_.data(), wte_.data(), wpe_.data(), N, C);
    for (int l = 0; l < L; l++) {
      const Layer& w = layers_[l];
      kernels::ref::KvLayerView kv{cache.k(l, 0), cache.v(l, 0), static_cast<int64_t>(cache.max_len()) * C};
      Ops::layernorm(ln_.data(), x, w.ln_1_w.data(), w.ln_1_b.data(), N, C, eps_);
      Ops::template linear<E::Store>(qkv_.data(), ln_.data(), w.attn, w.attn_b.data(), N);  // (N, 3C)
      Ops::kv_append(kv, qkv_.data(), slot_.data(), pos_.data(), N, C);
      Ops::attention(att_.data(), qkv_.data(), kv, slot_.data(), pos_.data(), N, C, H,
                   cache.max_len());
      Ops::template linear<E::Residual>(x, att_.data(), w.attn_proj, w.attn_proj_b.data(), N);
      Ops::layernorm(ln_.data(), x, w.ln_2_w.data(), w.ln_2_b.data(), N, C, eps_);
      Ops::template linear<E::Gelu>(fc_.data(), ln_.data(), w.fc, w.fc_b.data(), N);  // (N, 4C)
      Ops::template linear<E::Residual>(x, fc_.data(), w.mlp_proj, w.mlp_proj_b.data(), N);
    }
    // Only the rows whose logits are wanted go through ln_f and the (large) lm_head.
    int M = N;
    const float* rows = x;
    if (b.logits == model::Logits::Last) {
      M = S;
      int end = 0;
      for (int i = 0; i < S; i++) {
        end += b.seqs[i].n_new;
        std::copy_n(x + static_cast<int64_t>(end - 1) * C, C,
                    att_.data() + static_cast<int64_t>(i) * C);
      }
      rows = att_.data();
    }
    Ops::layernorm(ln_.data(), rows, ln_f_w_.data(), ln_f_b_.data(), M, C, eps_);
    logits.resize(static_cast<std::size_t>(M) * V);
    Ops::lm_head(logits.data(), ln_.data(), wte_.data(), M, V, C);
  }

  // Bytes a decode step must read at least once: every weight, lm_head (tied wte) included.
  std::size_t weight_bytes() const {
    std::size_t n = (wte_.size() + wpe_.size() + ln_f_w_.size() + ln_f_b_.size()) * sizeof(float);
    for (const auto& l : layers_)
      n += l.attn.bytes() + l.attn_proj.bytes() + l.fc.bytes() + l.mlp_proj.bytes() +
           (l.ln_1_w.size() * 4 + l.attn_b.size() + C + l.fc_b.size() + C) * sizeof(float);
    return n;
  }

  static std::string name() { return Cfg::name(); }

  // Read access for reports (footprint, quantization error) and tests.
  const std::vector<Layer>& layers() const { return layers_; }
  const std::vector<float>& wte() const { return wte_; }  // (V, C)
  const std::vector<float>& wpe() const { return wpe_; }  // (P, C)
  float layer_norm_eps() const { return eps_; }

 private:
  int validate(const Cache& cache, const model::Batch& b) const {
    if (b.seqs.empty()) fail("forward: the batch has no sequences");
    if (cache.n_layer() != L || cache.n_embd() != C)
      fail("forward: the cache was made for ", cache.n_layer(), " layers x ", cache.n_embd(),
           " features, the model has ", L, " x ", C);
    std::size_t n = 0;
    for (std::size_t i = 0; i < b.seqs.size(); i++) {
      const auto& s = b.seqs[i];
      if (s.n_new < 1)
        fail("forward: sequence ", i, " has n_new = ", s.n_new, " (an empty prompt?)");
      if (s.slot < 0 || s.slot >= cache.slots())
        fail("forward: sequence ", i, " uses cache slot ", s.slot, " outside [0, ", cache.slots(),
             ")");
      if (s.n_past < 0) fail("forward: sequence ", i, " has n_past = ", s.n_past);
      const int64_t end = static_cast<int64_t>(s.n_past) + s.n_new;
      if (end > P)
        fail("forward: sequence ", i, " would reach ", end, " tokens, more than n_positions = ", P,
             " of ", Dims::name);
      if (end > cache.max_len())
        fail("forward: sequence ", i, " would reach ", end,
             " tokens, more than the cache's max_len = ", cache.max_len());
      n += s.n_new;
    }
    if (n != b.tokens.size())
      fail("forward: sequences hold ", n, " new tokens but the batch has ", b.tokens.size());
    for (std::size_t i = 0; i < n; i++)
      if (b.tokens[i] < 0 || b.tokens[i] >= V)
        fail("forward: token id ", b.tokens[i], " at index ", i, " is outside the vocabulary [0, ",
             V, ")");
    return static_cast<int>(n);
  }

  void resize(int N) {
    const std::size_t n = N;
    if (x_.size() >= n * C) return;
    x_.resize(n * C), ln_.resize(n * C), att_.resize(n * C), qkv_.resize(n * 3 * C);
    fc_.resize(n * 4 * C), slot_.resize(n), pos_.resize(n);
  }

  float eps_;
  std::vector<float> wte_, wpe_, ln_f_w_, ln_f_b_;  // (V, C), (P, C), (C), (C)
  std::vector<Layer> layers_;
  // Scratch, grown to the largest step seen.
  std::vector<float> x_, ln_, att_, qkv_, fc_;
  std::vector<int32_t> slot_, pos_;
};

}  // namespace servekit
