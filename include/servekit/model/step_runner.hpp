// SPDX-License-Identifier: Apache-2.0
#pragma once
// StepRunner<Cfg>: what a model keeps to run its steps, apart from its weights: the step's plan
// (reused), the activations' scratch grown to the largest step seen, the rows each step
// reserves in the cache, and on device storage the stream, the staging buffer the plan goes up
// in (one copy), the buffer results come back in (one copy, the step's one wait) and the decode
// steps captured as CUDA graphs (backend/device_step.hpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "servekit/backend/host.hpp"
#include "servekit/core/error.hpp"
#include "servekit/core/row_sampling.hpp"
#include "servekit/kernels/lora_args.hpp"  // lora_mma_counters
#include "servekit/kernels/split_k_args.hpp"
#include "servekit/kv/cache.hpp"
#include "servekit/lora/policy.hpp"
#include "servekit/model/batch.hpp"
#include "servekit/model/step_plan.hpp"
#include "servekit/weights/matrix.hpp"

namespace servekit::model {

template <class Cfg>
class StepRunner {
 public:
  using Dims = typename Cfg::Dims;
  using Ops = backend::Ops<typename Cfg::Backend>;
  using Storage = typename Ops::Storage;
  template <class T>
  using Vec = typename Storage::template Vec<T>;
  using Mat = typename Ops::template Resident<weights::Matrix<typename Cfg::Weights>>;
  static constexpr int C = Dims::n_embd, H = Dims::n_head, V = Dims::vocab;
  static constexpr bool kLora = lora::enabled<typename Cfg::Lora>;
  // What a graph computes: all logits, the last ones, picks; or, for a step whose picks are
  // masked, its forward and then (a second graph, after the host has written the masks) the
  // masks' upload, the masking and the pick.
  static constexpr int kAllLogits = 0, kLastLogits = 1, kPick = 2, kForwardOfPick = 3,
                       kMaskAndPick = 4;
  static constexpr int kMaxGraphRows = 256;  // larger decode steps run eagerly

  // Where the plan's parts are in the staging buffer (device storage), in bytes.
  struct Staged {
    std::size_t idx = 0, sampling = 0, mask_rows = 0;
  };

  StepPlan plan;  // this step's, rebuilt by each forward
  // Scratch, grown to the largest step seen.
  Vec<float> x, ln, att, qkv, fc;  // (N, C) residual stream, (N, C) x 2, (N, 3C), (N, 4C)
  Vec<float> attn_ws;              // the attention's scratch (Ops::attention_workspace)
  // The linears' split-K scratch (kernels::SplitK), on backends that split (backend::SplitsK).
  Vec<float> split_part;
  Vec<int32_t> split_arrivals;
  Vec<float> logits;  // (M, V) on the device; unused by forward on host storage
  // forward_pick on host storage: each row's sampling parameters, the picked ids and their
  // logprobs. On device storage: (M) ids then (M) logprobs, downloaded in one copy.
  Vec<RowSampling> pick_rows;
  Vec<int32_t> pick_ids;
  Vec<float> pick_lp;
  Vec<int32_t> picks;
  // LoRA: the shrink's scratch (N, max_rank), the deltas (N, 4C; not on backend::FusesLora)
  Vec<float> lora_v, lora_d;
  Vec<int32_t> lora_arrivals;  // the tensor-core shrink's counters (zeros, as it leaves them)
  typename Storage::StepContext ctx;  // device storage: stream, staging, results, graphs

  // Sizes every buffer for steps of up to max_tokens new tokens over max_seqs sequences and
  // caches of up to max_len rows, so that no such step allocates; a larger step still grows
  // them. forward()'s Logits::All is sized for max_seqs rows of logits, not max_tokens.
  void reserve(int max_tokens, int max_seqs, int max_len) {
    const std::size_t S = max_seqs;
    resize(max_tokens);
    reserve_split(max_tokens);
    if (logits.size() < S * V) logits.resize(S * V);
    // Each sequence's rows take the few-rows attention kernel's workspace up to kFewRows.
    reserve_attention(max_len, std::min(max_tokens, max_seqs * kFewRows));
    if constexpr (!Storage::is_host) {
      if (picks.size() < 2 * S) picks.resize(2 * S);
      // What stage() puts: the plan's index arrays, the rows' sampling parameters and mask
      // rows, each section aligned; and stage_masks() a mask per sequence.
      const std::size_t W = (V + 31) / 32;
      const std::size_t in = StepLayout::make(max_tokens, kLora).size * sizeof(int32_t) +
                             S * (sizeof(RowSampling) + sizeof(int32_t)) +
                             3 * 16;  // the staging buffer aligns sections to 16 bytes
      ctx.reserve(in, 2 * S * sizeof(int32_t), S * W * sizeof(uint32_t));
    }
  }

  // What reserve(max_tokens, max_seqs, max_len) allocates, in bytes, before it does (the
  // staging buffers of device storage, a few KB, left out).
  static std::size_t reserve_bytes(int max_tokens, int max_seqs, int max_len) {
    const std::size_t N = max_tokens, S = max_seqs;
    std::size_t floats = N * 10 * C + S * V + Ops::attention_workspace(C, H, max_len, max_seqs);
    const auto [part, counters] = split_k_need(max_tokens);
    floats += part;
    std::size_t ints = counters;
    if constexpr (!Storage::is_host) ints += 2 * S;
    return floats * sizeof(float) + ints * sizeof(int32_t);
  }

  // Grows the scratch for the planned step (cache rows up to max_len; the LoRA shrink's
  // max_rank floats a row for each of its `parts` of K, and with several parts its counters,
  // kernels/lora_args.hpp) and reserves its rows in the cache. May throw (out of blocks); then
  // nothing was allocated in the cache.
  template <class Cache>
  void prepare(Cache& cache, const Batch& b, int max_rank, int parts = 1) {
    reserve_rows(cache, b);
    resize(plan.N);
    reserve_split(plan.N);
    reserve_attention(cache.max_len(), plan.n_few);
    if constexpr (kLora) {
      const std::size_t N = plan.N;
      const std::size_t v = N * std::max(max_rank, 1) * parts, d = N * 4 * C;  // c_fc: widest
      if (lora_v.size() < v) lora_v.resize(v);
      const auto counters = std::size_t(kernels::lora_mma_counters(plan.N, max_rank, parts));
      if (lora_arrivals.size() < counters) lora_arrivals.resize(counters);
      // A backend that adds the deltas in its linears' epilogue needs no delta matrix.
      if (!backend::FusesLora<Ops, typename Cfg::Lora> && lora_d.size() < d) lora_d.resize(d);
    }
  }

  // Device storage: the plan's index arrays, and for forward_pick its sampling rows and mask
  // rows (M slots, so that a step's upload has one size whatever its masks), into the staging
  // buffer (cleared first): the step's one upload, which a graph holds.
  Staged stage(bool sampling) requires(!Storage::is_host) {
    Staged s;
    ctx.in.clear();
    s.idx = ctx.in.put(std::span<const int32_t>(plan.idx));
    if (sampling) {
      s.sampling = ctx.in.put(plan.sampling);
      mask_slots_.assign(plan.M, -1);
      std::copy(plan.mask_rows.begin(), plan.mask_rows.end(), mask_slots_.begin());
      s.mask_rows = ctx.in.put(std::span<const int32_t>(mask_slots_));
    }
    return s;
  }
  // The step's masks into ctx.late after its forward is enqueued, in M slots (zeros past the
  // plan's n, as the mask rows' slots hold -1 there), so that their upload has one size: late,
  // when set, writes them first, while the device runs. If it throws, the step's work is
  // waited for: the staging buffers that work reads must outlive it. Returns their offset;
  // the upload is the masking's (forward_pick), on the step's stream after the forward.
  std::size_t stage_masks(const MaskWriter& late) requires(!Storage::is_host) {
    if (late) {
      try {
        late();
      } catch (...) {
        ctx.wait();
        throw;
      }
    }
    ctx.late.clear();
    const std::size_t W = (V + 31) / 32;
    return ctx.late.put_padded(std::span<const uint32_t>(plan.masks),
                               static_cast<std::size_t>(plan.M) * W);
  }

  // A decode step launches the same kernels with the same arguments at every step of its
  // shape (positions, rows, tokens and adapter slots are read from the index arrays), so it
  // can be a graph; `shape` is what else decides them (a LoRA step's, model/gpt2.hpp).
  // Prefill and mixed steps vary.
  template <class Cache>
  auto graph_key(const Cache& cache, int kind, std::vector<int32_t> shape = {}) const
      requires(!Storage::is_host) {
    using Key = typename Storage::StepContext::Key;
    std::optional<Key> k;
    if (plan.decode() && plan.N <= kMaxGraphRows) k = Key{&cache, plan.N, kind, std::move(shape)};
    return k;
  }

  // The linears' split-K scratch as the kernels take it.
  kernels::SplitK split_k() {
    return kernels::SplitK{split_part.data(), split_arrivals.data(), split_part.size(),
                           static_cast<int>(split_arrivals.size())};
  }

 private:
  // The rows each slot holds after this step (a slot may appear more than once: a padded
  // sequence's pad rows and its real rows), reserved in the cache before any kernel runs.
  template <class Cache>
  void reserve_rows(Cache& cache, const Batch& b) {
    reserve_.clear();
    for (const auto& s : b.seqs) {
      const int32_t rows = s.row_offset + s.n_past + s.n_new;
      auto it = std::find_if(reserve_.begin(), reserve_.end(),
                             [&](const kv::Reserve& r) { return r.slot == s.slot; });
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
    if (attn_ws.size() < n) attn_ws.resize(n);
  }
  void resize(int N) {
    const std::size_t n = N;
    if (x.size() >= n * C) return;
    x.resize(n * C), ln.resize(n * C), att.resize(n * C), qkv.resize(n * 3 * C);
    fc.resize(n * 4 * C);
  }
  // The linears' split-K scratch for steps of up to N rows, the largest any linear needs:
  // (floats of parts, arrival counters); none on backends that do not split.
  static std::pair<std::size_t, int> split_k_need(int N) {
    std::size_t floats = 0;
    int counters = 0;
    if constexpr (backend::SplitsK<Ops, Mat>)
      for (const auto& [K, Nout] : {std::pair{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {C, V}}) {
        const auto [f, c] = Ops::template split_k_size<Mat>(N, K, Nout);
        floats = std::max(floats, f), counters = std::max(counters, c);
      }
    return {floats, counters};
  }
  void reserve_split(int N) {
    const auto [floats, counters] = split_k_need(N);
    if (split_part.size() < floats) split_part.resize(floats);
    if (split_arrivals.size() < static_cast<std::size_t>(counters))
      split_arrivals.resize(counters);  // zeros, as the kernels leave them
  }

  std::vector<kv::Reserve> reserve_;
  std::vector<int32_t> mask_slots_;  // (M) the rows masks apply to, then -1
};

}  // namespace servekit::model
