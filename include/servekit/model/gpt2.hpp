// SPDX-License-Identifier: Apache-2.0
#pragma once
// Gpt2<Config>: the GPT-2 decoder for one composition of policies. It owns weights and
// scratch space only; sequences live in a cache the caller owns, and requests live above, in
// serve/. One forward() serves prefill, decode, mixed batches and the no-cache recompute.
// Every array the kernels read lives in the backend's storage (Ops::Vec, Ops::Resident): host
// vectors for Host and Emulated, device memory for Cuda. There a step is planned on the host
// (indices, sampling rows and masks packed in one pinned buffer), enqueued on the model's own
// stream behind one upload, and waited for once, by the download of its ids (or logits); a
// decode step is captured as a CUDA graph once and replayed (backend/device_step.hpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/backend/host.hpp"
#include "servekit/kernels/lora_args.hpp"
#include "servekit/kernels/sampling_args.hpp"
#include "servekit/kernels/split_k_args.hpp"
#include "servekit/kv/cache.hpp"
#include "servekit/lora/adapter.hpp"
#include "servekit/lora/policy.hpp"
#include "servekit/model/batch.hpp"
#include "servekit/model/config.hpp"
#include "servekit/model/gpt2_tensors.hpp"
#include "servekit/model/load_gpt2.hpp"
#include "servekit/weights/transposed.hpp"

namespace servekit {

template <class Cfg>
class Gpt2 {
 public:
  using Config = Cfg;
  using Dims = typename Cfg::Dims;
  using Ops = backend::Ops<typename Cfg::Backend>;
  using Storage = typename Ops::Storage;
  template <class T>
  using Vec = typename Storage::template Vec<T>;  // std::vector, or a device vector
  using Mat = typename Ops::template Resident<weights::Matrix<typename Cfg::Weights>>;
  using Cache = kv::cache_t<typename Cfg::Kv, Storage>;  // the layout policy's cache class
  static constexpr int L = Dims::n_layer, C = Dims::n_embd, H = Dims::n_head;
  static constexpr int V = Dims::vocab, P = Dims::n_positions;
  using Lora = typename Cfg::Lora;
  static constexpr bool kLora = lora::enabled<Lora>;
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

  // Host storage moves the tensors in; device storage uploads each one and frees its host
  // copy before the next, so at most one host tensor is held twice (the head: also its
  // transposed fp32 copy, while it is cast to the format).
  explicit Gpt2(model::Gpt2Tensors t)
      : eps_(t.config.layer_norm_epsilon), head_tied_(t.lm_head.empty()) {
    auto vec = [](std::vector<float>& v) { return Storage::to_vec(std::exchange(v, {})); };
    using HostMat = weights::Matrix<typename Cfg::Weights>;
    if (!t.lm_head.empty() && t.lm_head.size() != t.wte.size())
      fail("lm_head.weight: ", t.lm_head.size(), " values, wte.weight has ", t.wte.size());
    wpe_ = vec(t.wpe);
    ln_f_w_ = vec(t.ln_f_w);
    ln_f_b_ = vec(t.ln_f_b);
    layers_.reserve(L);
    // HF's tensor names, so that a format's load error says which matrix it could not take.
    auto wname = [](int i, const char* m) { return detail::cat("h.", i, ".", m, ".weight"); };
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
      layers_.push_back(std::move(l));
      l_i++;
    }
    if constexpr (kHeadInFormat) {
      // The step's largest matrix, read whole by every step: in the format, as a (C, V) linear,
      // so u8 keeps one (scale, min) per vocabulary row (per output channel) or per group.
      head_ = Ops::resident(
          HostMat::from_f32(weights::transposed(t.head(), V, C), C, V, "lm_head.weight"));
      t.lm_head = {};
    } else if (!t.lm_head.empty()) {
      head_f32_ = vec(t.lm_head);
    }
    wte_ = vec(t.wte);
  }

  // HF layout: dir/config.json + dir/model.safetensors, checked against Dims.
  static Gpt2 load(const std::filesystem::path& dir) { return Gpt2(model::load_gpt2<Dims>(dir)); }
  // Seeded random weights with HF's initialisation: for demos and benchmarks without a
  // checkpoint. Its text is meaningless.
  static Gpt2 random(uint64_t seed) { return Gpt2(model::random_gpt2<Dims>(seed)); }

  // A cache for `slots` sequences of up to max_len tokens. Paged: a pool of n_blocks blocks;
  // by default as many tokens as the contiguous layout would reserve (slots x max_len).
  Cache make_cache(int slots, int max_len = P) const {
    if constexpr (kv::is_paged<typename Cfg::Kv>) {
      constexpr int B = Cfg::Kv::block_tokens;
      return make_cache(slots, max_len, slots * ((std::max(max_len, 1) + B - 1) / B));
    } else {
      check_max_len(max_len);
      return Cache(L, C, slots, max_len);
    }
  }
  Cache make_cache(int slots, int max_len,
                   int n_blocks) const requires kv::is_paged<typename Cfg::Kv> {
    check_max_len(max_len);
    return Cache(L, C, slots, max_len, n_blocks);
  }

  // Runs one step. logits: (S, V) for Logits::Last, (N, V) for Logits::All.
  void forward(Cache& cache, const model::Batch& b, std::vector<float>& logits) {
    [[maybe_unused]] const auto scope = step_.scope();
    const Step st = plan(cache, b);
    logits.resize(static_cast<std::size_t>(st.M) * V);
    if constexpr (Storage::is_host) {
      enqueue(cache, st, idx_host_.data());
      head(logits.data(), st.M);
    } else {
      logits_.resize(logits.size());
      step_.run(graph_key(cache, st, st.last ? kLastLogits : kAllLogits), [&] {
        enqueue(cache, st, step_.in.template device<int32_t>(st.idx_at));
        head(logits_.data(), st.M);
      });
      Storage::download(std::span<float>(logits), logits_);  // the step's one wait
    }
  }

  // Backends whose Ops sample on the device (Emulated, Cuda) offer forward_pick.
  static constexpr bool kDeviceSampling = requires { Ops::device_sampling; };

  // Runs one step (Logits::Last) and picks each sequence's next token on the device, so only
  // the (S) ids and their logprobs come back, not (S, V) logits. rows: (S) each sequence's
  // sampling parameters; an id of -1 means the row had no number above -inf. logits, when not
  // null, gets the (S, V) logits too (a request asked for its top logprobs). masks: (n,
  // ceil(V / 32)) token masks of constrained rows (RowSampling::mask names one; bit v: token v
  // allowed), applied before sampling.
  void forward_pick(Cache& cache, const model::Batch& b, std::span<const kernels::RowSampling> rows,
                    std::span<int32_t> ids, std::span<float> logprobs,
                    std::vector<float>* logits = nullptr,
                    std::span<const uint32_t> masks = {}) requires kDeviceSampling {
    const std::size_t S = b.seqs.size();
    if (b.logits != model::Logits::Last)
      fail("forward_pick: picks one token per sequence; the batch asks for Logits::All");
    if (rows.size() != S || ids.size() != S || logprobs.size() != S)
      fail("forward_pick: ", S, " sequences but ", rows.size(), " sampling rows, ", ids.size(),
           " ids and ", logprobs.size(), " logprobs");
    const std::size_t W = (V + 31) / 32, n_masks = masks.size() / W;
    if (masks.size() % W != 0)
      fail("forward_pick: ", masks.size(), " mask words, not a multiple of ", W, " per mask");
    mask_rows_host_.clear();
    for (std::size_t m = 0; m < S; m++) {
      kernels::check_row(rows[m], static_cast<int>(m));
      const int k = rows[m].mask;
      if (k < -1 || k >= static_cast<int>(n_masks))
        fail("forward_pick: row ", m, " names mask ", k, " of ", n_masks);
      if (k >= 0) {
        if (k != static_cast<int>(mask_rows_host_.size()))
          fail("forward_pick: masks must be named in row order; row ", m, " names ", k);
        mask_rows_host_.push_back(static_cast<int32_t>(m));
      }
    }
    if (mask_rows_host_.size() != n_masks)
      fail("forward_pick: ", n_masks, " masks but ", mask_rows_host_.size(), " rows name one");
    [[maybe_unused]] const auto scope = step_.scope();
    const Step st = plan(cache, b);
    const int M = st.M, n = static_cast<int>(n_masks);
    logits_.resize(static_cast<std::size_t>(M) * V);
    if constexpr (Storage::is_host) {
      enqueue(cache, st, idx_host_.data());
      head(logits_.data(), M);
      Storage::upload(pick_rows_, rows);
      if (n > 0) Ops::mask_logits(logits_.data(), masks.data(), mask_rows_host_.data(), n, M, V);
      pick_ids_.resize(M), pick_lp_.resize(M);
      Ops::sample(pick_ids_.data(), pick_lp_.data(), logits_.data(), pick_rows_.data(), M, V);
      Storage::download(ids, pick_ids_);
      Storage::download(logprobs, pick_lp_);
    } else {
      // The sampling rows and masks go up with the indices, in one copy; ids and logprobs come
      // back together, in one copy: (M) ids, then (M) logprobs.
      auto& in = step_.in;
      const std::size_t rows_at = in.put(rows);
      const std::size_t mrows_at = in.put(std::span<const int32_t>(mask_rows_host_));
      const std::size_t masks_at = in.put(masks);
      picks_.resize(2 * static_cast<std::size_t>(M));
      int32_t* pick_ids = picks_.data();
      float* pick_lp = reinterpret_cast<float*>(pick_ids + M);
      step_.run(n > 0 ? std::nullopt : graph_key(cache, st, kPick), [&] {
        enqueue(cache, st, in.template device<int32_t>(st.idx_at));
        head(logits_.data(), M);
        if (n > 0)
          Ops::mask_logits(logits_.data(), in.template device<uint32_t>(masks_at),
                           in.template device<int32_t>(mrows_at), n, M, V);
        Ops::sample(pick_ids, pick_lp, logits_.data(),
                    in.template device<kernels::RowSampling>(rows_at), M, V);
      });
      const std::span<const int32_t> got = step_.download(picks_.data(), picks_.size());
      std::copy_n(got.data(), M, ids.data());  // the step's one wait
      std::memcpy(logprobs.data(), got.data() + M, M * sizeof(float));
    }
    if (logits) {
      logits->resize(static_cast<std::size_t>(M) * V);
      Storage::download(std::span<float>(*logits), logits_);
    }
  }

  // Sizes every step buffer for steps of up to max_tokens new tokens over max_seqs sequences
  // and caches of up to max_len rows, so that no such step allocates (an engine calls it with
  // its limits); a larger step still grows them. forward()'s Logits::All is sized for
  // max_seqs rows of logits, not max_tokens (that would be max_tokens x V floats).
  void reserve(int max_tokens, int max_seqs, int max_len = P) {
    if (max_seqs < 1 || max_tokens < max_seqs || max_len < 1)
      fail("Gpt2::reserve: needs 1 <= max_seqs <= max_tokens and max_len >= 1; got max_tokens = ",
           max_tokens, ", max_seqs = ", max_seqs, ", max_len = ", max_len);
    const std::size_t T = max_tokens, S = max_seqs;
    resize(max_tokens);
    reserve_split(max_tokens);
    if (logits_.size() < S * V) logits_.resize(S * V);
    reserve_attention(max_len, max_seqs);
    if constexpr (!Storage::is_host) {
      if (picks_.size() < 2 * S) picks_.resize(2 * S);
      // What plan() and forward_pick stage: the index arrays, the rows' sampling parameters,
      // a mask and its row per sequence, each section aligned.
      const std::size_t W = (V + 31) / 32;
      const std::size_t in = (by_kind_at(max_tokens) + T) * sizeof(int32_t) +
                             S * sizeof(kernels::RowSampling) + S * (W + 1) * sizeof(uint32_t) +
                             4 * 16;  // the staging buffer aligns sections to 16 bytes
      step_.reserve(in, 2 * S * sizeof(int32_t));
    }
  }

  // Device storage: whether decode steps are captured as CUDA graphs and replayed (default:
  // on), and how many are held.
  void set_graphs(bool on) requires(!Storage::is_host) { step_.set_graphs(on); }
  bool graphs() const requires(!Storage::is_host) { return step_.graphs(); }
  std::size_t graphs_captured() const requires(!Storage::is_host) {
    return step_.graphs_captured();
  }

  // Unmerged adapters: each added one gets a slot that model::Batch::adapters names per
  // sequence. Names are unique; a freed slot is reused.
  int add_adapter(lora::Adapter a) requires kLora {
    return add_adapter(std::make_shared<const lora::Adapter>(std::move(a)));
  }
  // Shared: the adapter store's host tier and the model hold one copy (on host storage).
  int add_adapter(std::shared_ptr<const lora::Adapter> p) requires kLora {
    const lora::Adapter& a = *p;
    if (static_cast<int>(a.layers.size()) != L)
      fail("adapter '", a.name, "' has ", a.layers.size(), " layers; ", Dims::name, " has ", L);
    if (find_adapter(a.name) >= 0) fail("adapter '", a.name, "' is already loaded");
    for (int l = 0; l < L; l++)
      for (int t = 0; t < lora::kTargets; t++)
        if (const auto* p = a.find(l, static_cast<lora::Target>(t))) {
          const auto [in, out] = lora::target_shape(static_cast<lora::Target>(t), C);
          if (p->in != in || p->out != out || p->a.size() != std::size_t(p->rank) * in ||
              p->b.size() != std::size_t(out) * p->rank)
            fail("adapter '", a.name, "' layer ", l, " ", lora::kTargetNames[t], " does not fit ",
                 Dims::name);
        }
    std::size_t i = 0;
    while (i < adapters_.size() && adapters_[i]) i++;
    if (i == adapters_.size()) adapters_.emplace_back(), adapter_dev_.emplace_back();
    if constexpr (!Storage::is_host) {  // the device's own copy of every A and B
      adapter_dev_[i].clear();
      for (const auto& layer : a.layers)
        for (const auto& q : layer)
          if (q) {
            adapter_dev_[i].push_back(Storage::to_vec(std::vector<float>(q->a)));
            adapter_dev_[i].push_back(Storage::to_vec(std::vector<float>(q->b)));
          }
    }
    adapters_[i] = std::move(p);
    lora_dirty_ = true;
    return static_cast<int>(i);
  }
  void remove_adapter(int slot) requires kLora {
    if (slot < 0 || slot >= static_cast<int>(adapters_.size()) || !adapters_[slot])
      fail("remove_adapter: no adapter in slot ", slot);
    adapters_[slot].reset();
    adapter_dev_[slot].clear();
    lora_dirty_ = true;
  }
  // The slot of the adapter named `name`, or -1.
  int find_adapter(std::string_view name) const {
    for (std::size_t i = 0; i < adapters_.size(); i++)
      if (adapters_[i] && adapters_[i]->name == name) return static_cast<int>(i);
    return -1;
  }
  const lora::Adapter* adapter(int slot) const {
    return slot >= 0 && slot < static_cast<int>(adapters_.size()) ? adapters_[slot].get() : nullptr;
  }
  // Slots in use or freed: adapter(s) for s in [0, adapter_slots()) finds every adapter.
  int adapter_slots() const { return static_cast<int>(adapters_.size()); }

  // Bytes a decode step must read at least once: every weight, lm_head included. With the
  // head in the format, a step reads only its tokens' rows of wte; those are not counted.
  std::size_t weight_bytes() const {
    std::size_t n = (wpe_.size() + ln_f_w_.size() + ln_f_b_.size()) * sizeof(float);
    n += kHeadInFormat ? head_.bytes() : head_f32().size() * sizeof(float);
    for (const auto& l : layers_)
      n += l.attn.bytes() + l.attn_proj.bytes() + l.fc.bytes() + l.mlp_proj.bytes() +
           (l.ln_1_w.size() * 4 + l.attn_b.size() + C + l.fc_b.size() + C) * sizeof(float);
    return n;
  }

  static std::string name() { return Cfg::name(); }

  // Read access for reports (footprint, quantization error) and tests. The arrays are in the
  // backend's storage: device memory on Cuda (sizes and bytes() read the same everywhere).
  const std::vector<Layer>& layers() const { return layers_; }
  const Vec<float>& wte() const { return wte_; }  // (V, C)
  // The output projection's storage, quantization state included, and that state alone: the
  // format's (C, V) copy, or fp32 (V, C) (wte itself when tied, counted here as 0 bytes).
  std::size_t head_bytes() const {
    if constexpr (kHeadInFormat) return head_.bytes();
    return head_f32_.size() * sizeof(float);
  }
  std::size_t head_state_bytes() const {
    if constexpr (kHeadInFormat) return head_.state_bytes();
    return 0;
  }
  bool head_tied() const { return head_tied_; }
  const Vec<float>& wpe() const { return wpe_; }  // (P, C)
  float layer_norm_eps() const { return eps_; }

 private:
  // A step's shape, planned on the host before any kernel is enqueued.
  struct Step {
    int N, S, M;         // new tokens, sequences, rows that get logits
    bool last;           // Logits::Last: the M rows are each sequence's last
    int n_decode;        // rows that are their sequence's one new token
    std::size_t idx_at;  // device storage: where the index arrays are in the staging buffer
    bool decode() const { return n_decode == N; }
  };
  // Where the rows listed by kind (decode rows, then the others) start in the index arrays.
  static constexpr std::size_t by_kind_at(int N) {
    return (6 + (kLora ? 4 : 0)) * static_cast<std::size_t>(N) + (kLora ? 1 : 0);
  }
  static constexpr int kAllLogits = 0, kLastLogits = 1, kPick = 2;  // what a graph computes
  static constexpr int kMaxGraphRows = 256;  // larger decode steps run eagerly

  // Validates the batch, reserves its cache rows and builds its index arrays on the host
  // (device storage: into the staging buffer, which it clears).
  Step plan(Cache& cache, const model::Batch& b) {
    const int N = validate(cache, b);
    const int S = static_cast<int>(b.seqs.size());
    reserve_rows(cache, b);  // may throw (out of blocks); then nothing was allocated
    const bool last = b.logits == model::Logits::Last;
    const int M = last ? S : N;
    resize(N);
    reserve_split(N);
    // (6, N) ints: token, slot, position, first and own cache row of each new token, then the
    // last row of each sequence. LoRA: then (N) each row's adapter slot, (N) the adapted rows
    // grouped by adapter, (N + 1) segment bounds and (N) segment slots.
    // Then (N) the rows by kind for the attention: decode rows, then the others.
    std::vector<int32_t>& h = idx_host_;
    h.resize(by_kind_at(N) + N);
    int32_t *tok = h.data(), *slot = tok + N, *pos = slot + N, *first = pos + N, *row = first + N;
    int32_t* last_row = row + N;  // (S)
    std::copy_n(b.tokens.begin(), N, tok);
    int r = 0, n_decode = 0;
    for (int i = 0; i < S; i++) {
      const auto& s = b.seqs[i];
      n_decode += s.n_new == 1;
      for (int j = 0; j < s.n_new; j++, r++) {
        slot[r] = s.slot, pos[r] = s.n_past + j;
        first[r] = s.row_offset, row[r] = s.row_offset + s.n_past + j;
      }
      last_row[i] = r - 1;
    }
    if constexpr (kLora) plan_lora(b, h.data() + 6 * static_cast<std::size_t>(N), N);
    int32_t *dec = h.data() + by_kind_at(N), *pre = dec + n_decode;
    r = 0;
    for (const auto& s : b.seqs)
      for (int j = 0; j < s.n_new; j++, r++) *(s.n_new == 1 ? dec++ : pre++) = r;
    reserve_attention(cache.max_len(), n_decode);
    std::size_t idx_at = 0;
    if constexpr (!Storage::is_host) {
      step_.in.clear();
      idx_at = step_.in.put(std::span<const int32_t>(h));
    }
    return {N, S, M, last, n_decode, idx_at};
  }

  // A decode step of a model without LoRA launches the same kernels with the same arguments at
  // every step of its shape (positions, rows and tokens are read from the index arrays), so it
  // can be a graph. LoRA steps launch per adapter group; prefill and mixed steps vary.
  auto graph_key(const Cache& cache, const Step& st, int kind) const requires(!Storage::is_host) {
    using Key = typename Storage::StepContext::Key;
    std::optional<Key> k;
    if (!kLora && st.decode() && st.N <= kMaxGraphRows) k = Key{&cache, st.N, kind};
    return k;
  }

  // Enqueues the step up to ln_f: the (M, C) rows that get logits are in ln_. idx: the index
  // arrays where the kernels read them.
  void enqueue(Cache& cache, const Step& st, const int32_t* idx) {
    const int N = st.N, M = st.M;
    const bool last = st.last;
    const int32_t *tok = idx, *slot = tok + N, *pos = slot + N, *first = pos + N, *row = first + N;
    const int32_t* last_row = row + N;
    if constexpr (kLora) lora_idx_ = idx + 6 * static_cast<std::size_t>(N);
    const int32_t* by_kind = idx + by_kind_at(N);
    using E = typename Ops::Epilogue;
    using T = lora::Target;
    float* x = x_.data();  // (N, C) residual stream
    Ops::embedding(x, tok, pos, wte_.data(), wpe_.data(), N, C);
    for (int l = 0; l < L; l++) {
      const Layer& w = layers_[l];
      const auto kv = cache.view(l);
      Ops::layernorm(ln_.data(), x, w.ln_1_w.data(), w.ln_1_b.data(), N, C, eps_);
      linear<E::Store>(qkv_.data(), ln_.data(), w.attn, w.attn_b.data(), N, l, T::Attn);  // (N, 3C)
      Ops::kv_append(kv, qkv_.data(), slot, row, N, C);
      Ops::attention(att_.data(), qkv_.data(), kv, slot, first, row, N, C, H, cache.max_len(),
                     attn_ws_.data(), by_kind, st.n_decode);
      linear<E::Residual>(x, att_.data(), w.attn_proj, w.attn_proj_b.data(), N, l, T::AttnProj);
      Ops::layernorm(ln_.data(), x, w.ln_2_w.data(), w.ln_2_b.data(), N, C, eps_);
      linear<E::Gelu>(fc_.data(), ln_.data(), w.fc, w.fc_b.data(), N, l, T::Fc);  // (N, 4C)
      linear<E::Residual>(x, fc_.data(), w.mlp_proj, w.mlp_proj_b.data(), N, l, T::MlpProj);
    }
    // Only the rows whose logits are wanted go through ln_f and the (large) lm_head.
    const float* rows = x;  // (M, C)
    if (last) {
      Ops::gather_rows(att_.data(), x, last_row, M, C);
      rows = att_.data();
    }
    Ops::layernorm(ln_.data(), rows, ln_f_w_.data(), ln_f_b_.data(), M, C, eps_);
  }

  // logits (M, V) of the M rows in ln_. In fp32 the head is read (V, C) by its own kernel, so
  // the tied wte is stored once; in any other format it is a (C, V) linear like the others.
  void head(float* logits, int M) {
    if constexpr (kHeadInFormat)
      linear_op<Ops::Epilogue::Store>(logits, ln_.data(), head_, nullptr, M, nullptr);
    else
      Ops::lm_head(logits, ln_.data(), head_f32().data(), M, V, C);
  }
  const Vec<float>& head_f32() const { return head_tied_ ? wte_ : head_f32_; }  // (V, C)

  // One linear of layer l. With LoRA, the rows' adapter deltas are computed first, into a
  // zeroed (N, Nout) buffer, and the linear adds that buffer before its epilogue (so c_fc's
  // delta reaches the GELU's input, as in PEFT).
  template <typename Ops::Epilogue E>
  void linear(float* out, const float* in, const Mat& W, const float* bias, int N, int l,
              lora::Target t) {
    if constexpr (kLora) {
      const int lt = l * lora::kTargets + static_cast<int>(t);
      const int slots = static_cast<int>(adapters_.size());
      bool any = false;  // does an adapter of this step adapt this linear?
      for (int32_t a : lora_distinct_) any = any || lora_tab_host_[lt * slots + a].a;
      if (any) {
        const auto [K, Nout] = lora::target_shape(t, C);
        float* d = lora_d_.data();  // (N, Nout)
        Ops::zero(d, static_cast<int64_t>(N) * Nout);
        const int32_t* ix = lora_idx_;
        kernels::LoraParams p{d,     in,
                              ix,    lora_tab_.data() + lt * slots,
                              slots, lora_v_.data(),
                              N,     K,
                              Nout,  lora_max_rank_};
        p.order = ix + N, p.seg_start = ix + 2 * N, p.seg_ad = ix + 3 * N + 1;
        p.n_seg = lora_n_seg_;
        Ops::template lora<Lora>(p, lora_distinct_);
        linear_op<E>(out, in, W, bias, N, d);
        return;
      }
    }
    linear_op<E>(out, in, W, bias, N, nullptr);
  }
  // Ops::linear, with the split-K scratch where the backend takes one.
  template <typename Ops::Epilogue E>
  void linear_op(float* out, const float* in, const Mat& W, const float* bias, int N,
                 const float* add) {
    if constexpr (backend::SplitsK<Ops, Mat>)
      Ops::template linear<E>(
          out, in, W, bias, N, add,
          kernels::SplitK{split_part_.data(), split_arrivals_.data(), split_part_.size(),
                          static_cast<int>(split_arrivals_.size())});
    else
      Ops::template linear<E>(out, in, W, bias, N, add);
  }

  // The step's LoRA plan, written at ix (host): (N) each row's slot, then the adapted rows
  // grouped by slot (batch order within a group), the groups' bounds and slots; the distinct
  // slots stay on the host. Rebuilds the per-linear tables if adapters came or went.
  void plan_lora(const model::Batch& b, int32_t* ix, int N) {
    if (lora_dirty_) rebuild_lora_tables();
    int32_t *ad = ix, *order = ix + N, *seg_start = ix + 2 * N, *seg_ad = ix + 3 * N + 1;
    std::fill(ad, ad + N, -1);
    if (!b.adapters.empty()) {
      int r = 0;
      for (std::size_t i = 0; i < b.seqs.size(); i++)
        for (int j = 0; j < b.seqs[i].n_new; j++) ad[r++] = b.adapters[i];
    }
    int n = 0;
    for (int r = 0; r < N; r++)
      if (ad[r] >= 0) order[n++] = r;
    std::stable_sort(order, order + n, [&](int32_t p, int32_t q) { return ad[p] < ad[q]; });
    lora_distinct_.clear();
    lora_n_seg_ = 0;
    for (int i = 0; i < n; i++)
      if (i == 0 || ad[order[i]] != ad[order[i - 1]]) {
        seg_start[lora_n_seg_] = i;
        seg_ad[lora_n_seg_++] = ad[order[i]];
        lora_distinct_.push_back(ad[order[i]]);
      }
    seg_start[lora_n_seg_] = n;
    const std::size_t v = static_cast<std::size_t>(N) * std::max(lora_max_rank_, 1);
    if (lora_v_.size() < v) lora_v_.resize(v);
    const std::size_t d = static_cast<std::size_t>(N) * 4 * C;  // the widest linear: c_fc
    if (lora_d_.size() < d) lora_d_.resize(d);
  }

  // (L * 4, slots): each linear's matrices per adapter slot, where the kernels read them.
  void rebuild_lora_tables() {
    const int slots = static_cast<int>(adapters_.size());
    lora_tab_host_.assign(static_cast<std::size_t>(L) * lora::kTargets * slots, {});
    lora_max_rank_ = 0;
    for (int i = 0; i < slots; i++) {
      if (!adapters_[i]) continue;
      const lora::Adapter& a = *adapters_[i];
      std::size_t k = 0;  // position in adapter_dev_[i]: A and B of each pair, in order
      for (int l = 0; l < L; l++)
        for (int t = 0; t < lora::kTargets; t++)
          if (const auto* q = a.find(l, static_cast<lora::Target>(t))) {
            const float *pa = q->a.data(), *pb = q->b.data();
            if constexpr (!Storage::is_host) {
              pa = adapter_dev_[i][k].data(), pb = adapter_dev_[i][k + 1].data();
              k += 2;
            }
            lora_tab_host_[(l * lora::kTargets + t) * slots + i] = {pa, pb, q->rank, a.scale};
            lora_max_rank_ = std::max(lora_max_rank_, q->rank);
          }
    }
    if constexpr (Storage::is_host)
      lora_tab_ = lora_tab_host_;
    else
      Storage::upload(lora_tab_, std::span<const kernels::LoraMats>(lora_tab_host_));
    lora_dirty_ = false;
  }

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
      if (s.row_offset < 0) fail("forward: sequence ", i, " has row_offset = ", s.row_offset);
      const int64_t end = static_cast<int64_t>(s.n_past) + s.n_new;
      const int64_t rows = end + s.row_offset;
      if (end > P)
        fail("forward: sequence ", i, " would reach ", end, " tokens, more than n_positions = ", P,
             " of ", Dims::name);
      if (rows > cache.max_len())
        fail("forward: sequence ", i, " would reach ", rows,
             " tokens, more than the cache's max_len = ", cache.max_len());
      // Its first n_past rows must already be in the slot: reading rows never written would
      // silently attend to another sequence's (or no) keys.
      if (s.n_past > 0 && int64_t{s.row_offset} + s.n_past > cache.length(s.slot))
        fail("forward: sequence ", i, " has n_past = ", s.n_past, " (row_offset ", s.row_offset,
             ") but cache slot ", s.slot, " holds only ", cache.length(s.slot), " tokens");
      n += s.n_new;
    }
    if (n != b.tokens.size())
      fail("forward: sequences hold ", n, " new tokens but the batch has ", b.tokens.size());
    if (!b.adapters.empty()) {
      if (b.adapters.size() != b.seqs.size())
        fail("forward: the batch names ", b.adapters.size(), " adapters for ", b.seqs.size(),
             " sequences");
      for (std::size_t i = 0; i < b.adapters.size(); i++) {
        const int32_t a = b.adapters[i];
        if (a < 0) continue;
        if (!kLora)
          fail("forward: sequence ", i, " asks for adapter slot ", a, ", but ", Cfg::name(),
               " serves no LoRA adapters (lora::None)");
        if (!adapter(a))
          fail("forward: sequence ", i, " asks for adapter slot ", a, ", which is empty");
      }
    }
    for (std::size_t i = 0; i < n; i++)
      if (b.tokens[i] < 0 || b.tokens[i] >= V)
        fail("forward: token id ", b.tokens[i], " at index ", i, " is outside the vocabulary [0, ",
             V, ")");
    return static_cast<int>(n);
  }

  static void check_max_len(int max_len) {
    if (max_len > P)
      fail("kv cache: max_len ", max_len, " exceeds n_positions ", P, " of ", Dims::name);
  }

  // The rows each slot holds after this step (a slot may appear more than once: a padded
  // sequence's pad rows and its real rows), reserved in the cache before any kernel runs.
  void reserve_rows(Cache& cache, const model::Batch& b) {
    reserve_.clear();
    for (const auto& s : b.seqs) {
      const int32_t rows = s.row_offset + s.n_past + s.n_new;
      auto it = std::find_if(reserve_.begin(), reserve_.end(),
                             [&](const kv::Reserve& x) { return x.slot == s.slot; });
      if (it == reserve_.end())
        reserve_.push_back({s.slot, rows});
      else
        it->rows = std::max(it->rows, rows);
    }
    cache.reserve(reserve_);
  }

  // The attention's scratch, for decode_rows decode rows over caches of up to max_len rows
  // (none on the host).
  void reserve_attention(int max_len, int decode_rows) {
    const std::size_t n = Ops::attention_workspace(C, H, max_len, decode_rows);
    if (attn_ws_.size() < n) attn_ws_.resize(n);
  }
  void resize(int N) {
    const std::size_t n = N;
    if (x_.size() >= n * C) return;
    x_.resize(n * C), ln_.resize(n * C), att_.resize(n * C), qkv_.resize(n * 3 * C);
    fc_.resize(n * 4 * C);
  }
  // The linears' split-K scratch, for steps of up to N rows: the largest any linear needs.
  void reserve_split(int N) {
    if constexpr (backend::SplitsK<Ops, Mat>) {
      std::size_t floats = 0;
      int counters = 0;
      for (const auto& [K, Nout] : {std::pair{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {C, V}}) {
        const auto [f, c] = Ops::template split_k_size<Mat>(N, K, Nout);
        floats = std::max(floats, f), counters = std::max(counters, c);
      }
      if (split_part_.size() < floats) split_part_.resize(floats);
      if (split_arrivals_.size() < static_cast<std::size_t>(counters))
        split_arrivals_.resize(counters);  // zeros, as the kernels leave them
    }
  }

  float eps_;
  bool head_tied_;                          // lm_head is wte (GPT-2), not a matrix of its own
  Vec<float> wte_, wpe_, ln_f_w_, ln_f_b_;  // (V, C), (P, C), (C), (C)
  Mat head_;                                // (C, V) the output projection in the format (not f32)
  Vec<float> head_f32_;  // (V, C) f32 when not tied to wte; empty: wte is the head
  std::vector<Layer> layers_;
  // Scratch, grown to the largest step seen.
  Vec<float> x_, ln_, att_, qkv_, fc_;
  Vec<float> attn_ws_;  // the attention's scratch (Ops::attention_workspace)
  // The linears' split-K scratch (kernels::SplitK), on backends that split (backend::SplitsK).
  Vec<float> split_part_;
  Vec<int32_t> split_arrivals_;
  // (6, N): token, slot, position, first cache row each query sees, its own row; then (S) the
  // last row of each sequence (and the LoRA plan). The kernels read it in place on host
  // storage; device storage uploads it in the step's staging buffer.
  std::vector<int32_t> idx_host_;
  Vec<float> logits_;  // (M, V) on the device; unused by forward on host storage
  // forward_pick on host storage: each row's sampling parameters, the picked ids and their
  // logprobs. On device storage: (M) ids then (M) logprobs, downloaded in one copy.
  Vec<kernels::RowSampling> pick_rows_;
  Vec<int32_t> pick_ids_;
  Vec<float> pick_lp_;
  Vec<int32_t> picks_;
  std::vector<int32_t> mask_rows_host_;  // the row each of forward_pick's masks applies to
  // The stream, staging buffer, result buffer and captured graphs of device storage's steps.
  typename Storage::StepContext step_;
  std::vector<kv::Reserve> reserve_;
  // Unmerged adapters by slot; on device storage, each one's A and B matrices uploaded.
  std::vector<std::shared_ptr<const lora::Adapter>> adapters_;
  std::vector<std::vector<Vec<float>>> adapter_dev_;
  // (L * 4, slots) each linear's matrices per slot (a host copy to decide which linears a
  // step adapts), rebuilt when adapters come and go; the widest rank among them.
  std::vector<kernels::LoraMats> lora_tab_host_;
  Vec<kernels::LoraMats> lora_tab_;
  bool lora_dirty_ = true;
  int lora_max_rank_ = 0;
  // This step: the plan in the kernels' copy of the indices, the distinct slots (host), the
  // number of adapter groups, the shrink's scratch (N, max_rank) and the deltas (N, 4C).
  const int32_t* lora_idx_ = nullptr;
  std::vector<int32_t> lora_distinct_;
  int lora_n_seg_ = 0;
  Vec<float> lora_v_, lora_d_;
};

}  // namespace servekit
