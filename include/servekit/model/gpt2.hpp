// SPDX-License-Identifier: Apache-2.0
#pragma once
// Gpt2<Config>: the GPT-2 decoder for one composition of policies: its forward pass over
// weights (model/gpt2_weights.hpp), adapters (model/adapter_registry.hpp) and a runner that
// holds the step's plan and scratch (model/step_runner.hpp). Sequences live in a cache the
// caller owns, and requests live above, in serve/. One forward() serves prefill, decode, mixed
// batches, the no-cache recompute and a speculative verify (several rows of logits per
// sequence).
//
// A step is planned on the host first (model/step_plan.hpp: the index arrays with named
// offsets, the sampling rows, the masks); on device storage the plan goes up in one copy, the
// kernels are enqueued on the model's own stream, and the host waits once, on the download of
// the ids (or logits); a decode step is captured as a CUDA graph once and replayed.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "servekit/backend/host.hpp"
#include "servekit/core/error.hpp"
#include "servekit/core/row_sampling.hpp"
#include "servekit/kernels/lora_args.hpp"
#include "servekit/kv/cache.hpp"
#include "servekit/lora/adapter.hpp"
#include "servekit/lora/policy.hpp"
#include "servekit/model/adapter_registry.hpp"
#include "servekit/model/batch.hpp"
#include "servekit/model/config.hpp"
#include "servekit/model/gpt2_weights.hpp"
#include "servekit/model/load_gpt2.hpp"
#include "servekit/model/random_gpt2.hpp"
#include "servekit/model/step_plan.hpp"
#include "servekit/model/step_runner.hpp"

namespace servekit {

template <class Cfg>
class Gpt2 {
 public:
  using Config = Cfg;
  using Dims = typename Cfg::Dims;
  using Weights = model::Gpt2Weights<Cfg>;
  using Runner = model::StepRunner<Cfg>;
  using Ops = typename Weights::Ops;
  using Storage = typename Ops::Storage;
  template <class T>
  using Vec = typename Storage::template Vec<T>;  // std::vector, or a device vector
  using Mat = typename Weights::Mat;
  using Layer = typename Weights::Layer;
  using Cache = kv::cache_t<typename Cfg::Kv, Storage>;  // the layout policy's cache class
  static constexpr int L = Dims::n_layer, C = Dims::n_embd, H = Dims::n_head;
  static constexpr int V = Dims::vocab, P = Dims::n_positions;
  using Lora = typename Cfg::Lora;
  static constexpr bool kLora = lora::enabled<Lora>;
  // The adapters' storage: fp32, or the weights' 16-bit format for the segmented policy's
  // tensor-core kernels on the device (model/adapter_registry.hpp).
  using LoraFormat = model::adapter_format_t<typename Cfg::Weights, Lora, Storage, Dims::n_embd>;
  // The slices of the LoRA shrink's scratch: one, or the tensor-core shrink's parts of the
  // widest K (c_proj's 4 n_embd).
  static constexpr int kLoraParts =
      std::is_same_v<LoraFormat, weights::F32> ? 1 : kernels::lora_mma_parts(4 * C);
  static constexpr bool kHeadInFormat = Weights::kHeadInFormat;

  explicit Gpt2(model::Gpt2Tensors t) : w_(std::move(t)) {}

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
      return Cache(L, C, slots, max_len, H);
    }
  }
  Cache make_cache(int slots, int max_len,
                   int n_blocks) const requires kv::is_paged<typename Cfg::Kv> {
    check_max_len(max_len);
    return Cache(L, C, slots, max_len, n_blocks, H);
  }

  // Runs one step. logits: (M, V): for Logits::Last each sequence's last n_logits rows (one
  // unless asked), for Logits::All every new token's.
  void forward(Cache& cache, const model::Batch& b, std::vector<float>& logits) {
    [[maybe_unused]] const auto scope = run_.ctx.scope();
    const model::StepPlan& p = check(cache, b);
    prepare(cache, b);
    logits.resize(static_cast<std::size_t>(p.M) * V);
    if constexpr (Storage::is_host) {
      enqueue(cache, p.idx.data());
      head(logits.data(), p.M);
    } else {
      run_.logits.resize(logits.size());
      const auto at = run_.stage(false);
      run_.ctx.run(graph_key(cache, p.all ? Runner::kAllLogits : Runner::kLastLogits), [&] {
        enqueue(cache, run_.ctx.in.template device<int32_t>(at.idx));
        head(run_.logits.data(), p.M);
      });
      Storage::download(std::span<float>(logits), run_.logits);  // the step's one wait
    }
  }

  // Backends whose Ops sample on the device (Emulated, Cuda) offer forward_pick.
  static constexpr bool kDeviceSampling = requires { Ops::device_sampling; };

  // Runs one step (Logits::Last) and picks a token for each of its M rows of logits on the
  // device, so only the (M) ids and their logprobs come back, not (M, V) logits. b.sampling:
  // (M) each row's sampling parameters; an id of -1 means the row had no number above -inf.
  // logits, when not null, gets the (M, V) logits too (a request asked for its top logprobs).
  // b.masks: (n, ceil(V / 32)) token masks of constrained rows (RowSampling::mask names one;
  // bit v: token v allowed), applied before sampling; written by b.late_masks, when set, while
  // the forward runs.
  void forward_pick(Cache& cache, const model::Batch& b, std::span<int32_t> ids,
                    std::span<float> logprobs,
                    std::vector<float>* logits = nullptr) requires kDeviceSampling {
    if (b.logits != model::Logits::Last)
      fail("forward_pick: picks one token per row of logits; the batch asks for Logits::All");
    model::StepPlan& p = check(cache, b);
    model::plan_sampling(p, b.sampling, b.masks, V);
    if (ids.size() != static_cast<std::size_t>(p.M) || logprobs.size() != ids.size())
      fail("forward_pick: ", p.M, " rows of logits but ", ids.size(), " ids and ", logprobs.size(),
           " logprobs");
    [[maybe_unused]] const auto scope = run_.ctx.scope();
    prepare(cache, b);
    const int M = p.M, n = static_cast<int>(p.mask_rows.size());
    run_.logits.resize(static_cast<std::size_t>(M) * V);
    if constexpr (Storage::is_host) {
      enqueue(cache, p.idx.data());
      head(run_.logits.data(), M);
      Storage::upload(run_.pick_rows, p.sampling);
      if (n > 0 && b.late_masks) b.late_masks();
      if (n > 0) Ops::mask_logits(run_.logits.data(), p.masks.data(), p.mask_rows.data(), n, M, V);
      run_.pick_ids.resize(M), run_.pick_lp.resize(M);
      Ops::sample(run_.pick_ids.data(), run_.pick_lp.data(), run_.logits.data(),
                  run_.pick_rows.data(), M, V);
      Storage::download(ids, run_.pick_ids);
      Storage::download(logprobs, run_.pick_lp);
    } else {
      // ids and logprobs come back together, in one copy: (M) ids, then (M) logprobs. A step
      // with masks runs as two graphs: its forward, then its masks' upload, the masking and the
      // pick. Between them the host has made the masks (before the step, or late: while the
      // device runs the forward) and staged them in M slots, so that the second graph's copy
      // and launches are the same at every step of the shape, whichever rows are masked.
      const auto at = run_.stage(true);
      auto& in = run_.ctx.in;
      auto& late = run_.ctx.late;
      run_.picks.resize(2 * static_cast<std::size_t>(M));
      int32_t* pick_ids = run_.picks.data();
      float* pick_lp = reinterpret_cast<float*>(pick_ids + M);
      // The masks' device side sized before the forward's graph is launched: sizing it after
      // could free a buffer, which drops every graph, the one running included.
      if (n > 0) late.reserve(static_cast<std::size_t>(M) * ((V + 31) / 32) * sizeof(uint32_t));
      // (Device addresses once run() has sized the staging buffer's device side.)
      auto rows = [&] { return in.template device<RowSampling>(at.sampling); };
      run_.ctx.run(graph_key(cache, n > 0 ? Runner::kForwardOfPick : Runner::kPick), [&] {
        enqueue(cache, in.template device<int32_t>(at.idx));
        head(run_.logits.data(), M);
        if (n == 0) Ops::sample(pick_ids, pick_lp, run_.logits.data(), rows(), M, V);
      });
      if (n > 0) {
        const std::size_t masks = run_.stage_masks(b.late_masks);
        // The masks and the pick launch no LoRA kernel: their graph needs no LoRA shape.
        run_.ctx.run(run_.graph_key(cache, Runner::kMaskAndPick), late, [&] {
          Ops::mask_logits(run_.logits.data(), late.template device<uint32_t>(masks),
                           in.template device<int32_t>(at.mask_rows), M, M, V);
          Ops::sample(pick_ids, pick_lp, run_.logits.data(), rows(), M, V);
        });
      }
      const std::span<const int32_t> got = run_.ctx.download(run_.picks.data(), run_.picks.size());
      std::copy_n(got.data(), M, ids.data());  // the step's one wait
      std::memcpy(logprobs.data(), got.data() + M, M * sizeof(float));
    }
    if (logits) {
      logits->resize(static_cast<std::size_t>(M) * V);
      Storage::download(std::span<float>(*logits), run_.logits);
    }
  }
  // The same, with the sampling rows and masks beside the batch rather than in it.
  void forward_pick(Cache& cache, model::Batch b, std::span<const RowSampling> rows,
                    std::span<int32_t> ids, std::span<float> logprobs,
                    std::vector<float>* logits = nullptr,
                    std::span<const uint32_t> masks = {}) requires kDeviceSampling {
    b.sampling = rows, b.masks = masks;
    forward_pick(cache, b, ids, logprobs, logits);
  }

  // Sizes every step buffer for steps of up to max_tokens new tokens over max_seqs sequences
  // and caches of up to max_len rows, so that no such step allocates (an engine calls it with
  // its limits); a larger step still grows them.
  void reserve(int max_tokens, int max_seqs, int max_len = P) {
    if (max_seqs < 1 || max_tokens < max_seqs || max_len < 1)
      fail("Gpt2::reserve: needs 1 <= max_seqs <= max_tokens and max_len >= 1; got max_tokens = ",
           max_tokens, ", max_seqs = ", max_seqs, ", max_len = ", max_len);
    run_.reserve(max_tokens, max_seqs, max_len);
  }

  // Bytes reserve(max_tokens, max_seqs, max_len) takes, computed without allocating.
  static std::size_t reserve_bytes(int max_tokens, int max_seqs, int max_len = P) {
    return Runner::reserve_bytes(max_tokens, max_seqs, max_len);
  }

  // Device storage: whether decode steps are captured as CUDA graphs and replayed (default:
  // on), and how many are held.
  void set_graphs(bool on) requires(!Storage::is_host) { run_.ctx.set_graphs(on); }
  bool graphs() const requires(!Storage::is_host) { return run_.ctx.graphs(); }
  std::size_t graphs_captured() const requires(!Storage::is_host) {
    return run_.ctx.graphs_captured();
  }

  // Unmerged adapters (model/adapter_registry.hpp): each added one gets a slot that
  // model::Batch::adapters names per sequence.
  int add_adapter(lora::Adapter a) requires kLora {
    return add_adapter(std::make_shared<const lora::Adapter>(std::move(a)));
  }
  // Shared: the adapter store's host tier and the model hold one copy (on host storage).
  int add_adapter(std::shared_ptr<const lora::Adapter> p) requires kLora {
    return adapters_.add(std::move(p));
  }
  void remove_adapter(int slot) requires kLora { adapters_.remove(slot); }
  int find_adapter(std::string_view name) const { return adapters_.find(name); }  // or -1
  // The bytes `a` takes where this model's kernels read adapters (fp32, or 16-bit on a 16-bit
  // composition's segmented device step: model/adapter_registry.hpp).
  static std::size_t adapter_bytes(const lora::Adapter& a) requires kLora {
    return decltype(adapters_)::bytes_of(a);
  }
  const lora::Adapter* adapter(int slot) const { return adapters_.get(slot); }
  int adapter_slots() const { return adapters_.slots(); }

  // Bytes a decode step must read at least once: every weight, lm_head included.
  std::size_t weight_bytes() const { return w_.bytes(); }
  static std::string name() { return Cfg::name(); }

  // Read access for reports (footprint, quantization error) and tests. The arrays are in the
  // backend's storage: device memory on Cuda (sizes and bytes() read the same everywhere).
  const Weights& weights() const { return w_; }
  const std::vector<Layer>& layers() const { return w_.layers; }
  const Vec<float>& wte() const { return w_.wte; }  // (V, C)
  const Vec<float>& wpe() const { return w_.wpe; }  // (P, C)
  std::size_t head_bytes() const { return w_.head_bytes(); }
  std::size_t head_state_bytes() const { return w_.head_state_bytes(); }
  bool head_tied() const { return w_.head_tied; }
  float layer_norm_eps() const { return w_.eps; }

 private:
  // Checks b and builds its plan; nothing else changes if it throws.
  model::StepPlan& check(const Cache& cache, const model::Batch& b) {
    model::build_plan<Cfg>(run_.plan, cache, b, [&](int a) { return adapters_.get(a) != nullptr; });
    return run_.plan;
  }
  // The step's graph key (StepRunner::graph_key). A LoRA step's launches also depend on which
  // linears its adapters adapt, the widest rank and the slots' count (grids, strides, the
  // tables' addresses), and Segmented's groups (its grids) or Loop's adapters (a pass each);
  // the rows' slots and groups themselves are read from the index arrays.
  auto graph_key(const Cache& cache, int kind) const requires(!Storage::is_host) {
    std::vector<int32_t> shape;
    if constexpr (kLora) {
      const model::StepPlan& p = run_.plan;
      if (!p.lora_distinct.empty()) {
        shape = {adapters_.max_rank(), adapters_.slots()};
        for (int lt = 0; lt < L * lora::kTargets; lt++)
          shape.push_back(adapters_.adapts(lt, p.lora_distinct));
        if constexpr (std::is_same_v<Lora, lora::Segmented>)
          shape.push_back(p.lora_n_seg), shape.push_back(p.lora_seg_rows);
        if constexpr (std::is_same_v<Lora, lora::Loop>)
          shape.insert(shape.end(), p.lora_distinct.begin(), p.lora_distinct.end());
      }
    }
    return run_.graph_key(cache, kind, std::move(shape));
  }
  // Then the plan's LoRA groups, the scratch grown, and the step's cache rows reserved.
  void prepare(Cache& cache, const model::Batch& b) {
    if constexpr (kLora) adapters_.plan(run_.plan, b);
    run_.prepare(cache, b, kLora ? adapters_.max_rank() : 0, kLoraParts);
  }

  // Enqueues the step up to ln_f: the (M, C) rows that get logits are in run_.ln. idx: the
  // plan's index arrays where the kernels read them.
  void enqueue(Cache& cache, const int32_t* idx) {
    const model::StepPlan& p = run_.plan;
    const model::StepLayout& at = p.at;
    const int N = p.N, M = p.M;
    const int32_t *tok = idx + at.tok, *slot = idx + at.slot, *pos = idx + at.pos;
    const int32_t *first = idx + at.first, *row = idx + at.row, *by_kind = idx + at.by_kind;
    idx_ = idx;
    using E = typename Ops::Epilogue;
    using T = lora::Target;
    auto& r = run_;
    float* x = r.x.data();  // (N, C) residual stream
    Ops::embedding(x, tok, pos, w_.wte.data(), w_.wpe.data(), N, C);
    for (int l = 0; l < L; l++) {
      const Layer& w = w_.layers[l];
      const auto kv = cache.view(l);
      Ops::layernorm(r.ln.data(), x, w.ln_1_w.data(), w.ln_1_b.data(), N, C, w_.eps);
      linear<E::Store>(r.qkv.data(), r.ln.data(), w.attn, w.attn_b.data(), l, T::Attn);  // (N, 3C)
      Ops::kv_append(kv, r.qkv.data(), slot, row, N, C);
      Ops::attention(r.att.data(), r.qkv.data(), kv, slot, first, row, N, C, H, cache.max_len(),
                     r.attn_ws.data(), by_kind, p.n_few);
      linear<E::Residual>(x, r.att.data(), w.attn_proj, w.attn_proj_b.data(), l, T::AttnProj);
      Ops::layernorm(r.ln.data(), x, w.ln_2_w.data(), w.ln_2_b.data(), N, C, w_.eps);
      linear<E::Gelu>(r.fc.data(), r.ln.data(), w.fc, w.fc_b.data(), l, T::Fc);  // (N, 4C)
      linear<E::Residual>(x, r.fc.data(), w.mlp_proj, w.mlp_proj_b.data(), l, T::MlpProj);
    }
    // Only the rows whose logits are wanted go through ln_f and the (large) lm_head.
    const float* rows = x;  // (M, C)
    if (!p.all) {
      Ops::gather_rows(r.att.data(), x, idx + at.pick, M, C);
      rows = r.att.data();
    }
    Ops::layernorm(r.ln.data(), rows, w_.ln_f_w.data(), w_.ln_f_b.data(), M, C, w_.eps);
  }

  // logits (M, V) of the M rows in run_.ln. In fp32 the head is read (V, C) by its own kernel,
  // so the tied wte is stored once; in any other format it is a (C, V) linear like the others.
  void head(float* logits, int M) {
    if constexpr (kHeadInFormat)
      linear_op<Ops::Epilogue::Store>(logits, run_.ln.data(), w_.head, nullptr, M, nullptr);
    else
      Ops::lm_head(logits, run_.ln.data(), w_.head_f32().data(), M, V, C);
  }

  // One linear of layer l over the step's N rows. With LoRA, the rows' adapter deltas are
  // computed first, into an (N, Nout) buffer (zeros for rows without one), and the linear adds
  // that buffer before its epilogue (so c_fc's delta reaches the GELU's input, as in PEFT); a
  // backend that fuses the dispatch (backend::FusesLora) adds them as it stores each row
  // instead, the same bits.
  template <typename Ops::Epilogue E>
  void linear(float* out, const float* in, const Mat& W, const float* bias, int l, lora::Target t) {
    const model::StepPlan& p = run_.plan;
    const int N = p.N;
    if constexpr (kLora) {
      const int lt = l * lora::kTargets + static_cast<int>(t);
      if (adapters_.adapts(lt, p.lora_distinct)) {
        const auto [K, Nout] = lora::target_shape(t, C);
        constexpr bool fused = backend::FusesLora<Ops, Lora>;
        float* d = fused ? nullptr : run_.lora_d.data();  // (N, Nout)
        const int32_t* ix = idx_;
        kernels::LoraParams q{d,
                              in,
                              ix + p.at.lora_slot,
                              adapters_.table(lt),
                              adapters_.slots(),
                              run_.lora_v.data(),
                              N,
                              K,
                              Nout,
                              adapters_.max_rank()};
        q.order = ix + p.at.lora_order, q.seg_start = ix + p.at.lora_seg_start;
        q.seg_ad = ix + p.at.lora_seg_slot, q.n_seg = p.lora_n_seg;
        q.seg_rows = p.lora_seg_rows;
        q.arrivals = run_.lora_arrivals.data();
        if constexpr (fused) {
          Ops::template linear_lora<E, Lora>(out, in, W, bias, N, q);
        } else {
          Ops::template lora_into<Lora, LoraFormat>(q, p.lora_distinct);  // d = the deltas
          linear_op<E>(out, in, W, bias, N, d);
        }
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
      Ops::template linear<E>(out, in, W, bias, N, add, run_.split_k());
    else
      Ops::template linear<E>(out, in, W, bias, N, add);
  }

  static void check_max_len(int max_len) {
    if (max_len > P)
      fail("kv cache: max_len ", max_len, " exceeds n_positions ", P, " of ", Dims::name);
  }

  Weights w_;
  model::AdapterRegistry<Dims, Storage, LoraFormat> adapters_;
  Runner run_;
  const int32_t* idx_ = nullptr;  // this step's index arrays, where the kernels read them
};

}  // namespace servekit
