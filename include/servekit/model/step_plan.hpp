// SPDX-License-Identifier: Apache-2.0
#pragma once
// StepPlan: what one forward must do, as data, built on the host before any kernel is
// enqueued. A model::Batch says it in the caller's terms (sequences, tokens, sampling rows);
// the plan says it in the kernels' terms: one packed int32 array whose sections are found by
// named offsets (StepLayout, in the manner of flashinfer's DecodePlanInfo), plus the step's
// shape and the host-side facts that decide which kernels run. On host storage the kernels
// read the array in place; device storage stages it, the sampling rows and the masks in one
// upload (model/step_runner.hpp).
//
//   Batch --build_plan--> StepPlan --(LoRA: AdapterRegistry::plan)--> Gpt2::enqueue reads idx
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/core/row_sampling.hpp"
#include "servekit/lora/policy.hpp"
#include "servekit/model/batch.hpp"

namespace servekit::model {

// Where each section of StepPlan::idx starts, in int32s. N: the step's new tokens.
struct StepLayout {
  // (N) each: the token, its cache slot, its position, the first cache row it attends to and
  // the cache row it writes.
  std::size_t tok = 0, slot = 0, pos = 0, first = 0, row = 0;
  // (M <= N) which new row each row of logits is (Logits::Last); All reads the rows in order.
  std::size_t pick = 0;
  // LoRA: (N) each row's adapter slot (-1: none), (N) the adapted rows grouped by slot (batch
  // order within a group) and then the others, (N + 1) the groups' bounds in that order, (N)
  // each group's slot.
  std::size_t lora_slot = 0, lora_order = 0, lora_seg_start = 0, lora_seg_slot = 0;
  std::size_t by_kind = 0;  // (N) the rows by kind for the attention: few-row ones, then others
  std::size_t size = 0;     // int32s in all

  static StepLayout make(int n, bool lora) {
    const std::size_t N = static_cast<std::size_t>(n);
    StepLayout l;
    std::size_t at = 0;
    auto take = [&](std::size_t& field, std::size_t count) { field = at, at += count; };
    take(l.tok, N), take(l.slot, N), take(l.pos, N), take(l.first, N), take(l.row, N);
    take(l.pick, N);
    if (lora) {
      take(l.lora_slot, N), take(l.lora_order, N), take(l.lora_seg_start, N + 1);
      take(l.lora_seg_slot, N);
    }
    take(l.by_kind, N);
    l.size = at;
    return l;
  }
};

// A sequence of at most kFewRows new tokens (a decode's one, a speculative verify's k + 1, a
// short chunk) takes the attention kernel made for few query rows: its grid is over rows, heads
// and splits of the cache, where the prefill kernel's is over query tiles of 64 rows, so a few
// rows a sequence left a dozen blocks on the device (an H100, a batch-4 verify of 2 rows a
// sequence: 2.7 ms of prefill attention in a step, where a plain step's decode attention took
// 0.45 ms). The two kernels sum a row in the same order: the choice changes no bit.
inline constexpr int kFewRows = 16;

struct StepPlan {
  int N = 0, S = 0, M = 0;  // new tokens, sequences, rows that get logits
  bool all = false;         // Logits::All: the M = N rows in order, no gather
  int n_decode = 0;         // rows that are their sequence's one new token
  int n_few = 0;            // rows of sequences of at most kFewRows new tokens (by_kind's first)
  StepLayout at;
  std::vector<int32_t> idx;  // (at.size) the packed index arrays
  // forward_pick: (M) each logits row's sampling; the rows masks apply to, and the (n_masks,
  // ceil(V / 32)) masks themselves, in that order.
  std::span<const RowSampling> sampling;
  std::vector<int32_t> mask_rows;
  std::span<const uint32_t> masks;
  // LoRA, on the host: the distinct adapter slots of the step and its number of groups.
  std::vector<int32_t> lora_distinct;
  int lora_n_seg = 0, lora_seg_rows = 0;  // and the longest group's rows

  bool decode() const { return n_decode == N; }
  int32_t* section(std::size_t offset) { return idx.data() + offset; }
};

// Checks b against a cache and the model of composition Cfg and writes its plan.
// has_adapter(slot): whether the model holds an adapter in that slot. Throws servekit::Error
// naming the sequence and value at fault; then nothing was changed but the plan.
template <class Cfg, class Cache, class HasAdapter>
void build_plan(StepPlan& p, const Cache& cache, const Batch& b, HasAdapter&& has_adapter) {
  using Dims = typename Cfg::Dims;
  constexpr int L = Dims::n_layer, C = Dims::n_embd, P = Dims::n_positions, V = Dims::vocab;
  constexpr bool lora = lora::enabled<typename Cfg::Lora>;
  if (b.seqs.empty()) fail("forward: the batch has no sequences");
  if (cache.n_layer() != L || cache.n_embd() != C)
    fail("forward: the cache was made for ", cache.n_layer(), " layers x ", cache.n_embd(),
         " features, the model has ", L, " x ", C);
  const bool all = b.logits == Logits::All;
  std::size_t n = 0, m = 0;
  for (std::size_t i = 0; i < b.seqs.size(); i++) {
    const auto& s = b.seqs[i];
    if (s.n_new < 1) fail("forward: sequence ", i, " has n_new = ", s.n_new, " (an empty prompt?)");
    if (s.slot < 0 || s.slot >= cache.slots())
      fail("forward: sequence ", i, " uses cache slot ", s.slot, " outside [0, ", cache.slots(),
           ")");
    if (s.n_past < 0) fail("forward: sequence ", i, " has n_past = ", s.n_past);
    if (s.row_offset < 0) fail("forward: sequence ", i, " has row_offset = ", s.row_offset);
    if (!all && (s.n_logits < 1 || s.n_logits > s.n_new))
      fail("forward: sequence ", i, " asks for the logits of its last ", s.n_logits,
           " rows; it has ", s.n_new, " new tokens");
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
    m += all ? s.n_new : s.n_logits;
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
      if (!lora)
        fail("forward: sequence ", i, " asks for adapter slot ", a, ", but ", Cfg::name(),
             " serves no LoRA adapters (lora::None)");
      if (!has_adapter(a))
        fail("forward: sequence ", i, " asks for adapter slot ", a, ", which is empty");
    }
  }
  for (std::size_t i = 0; i < n; i++)
    if (b.tokens[i] < 0 || b.tokens[i] >= V)
      fail("forward: token id ", b.tokens[i], " at index ", i, " is outside the vocabulary [0, ", V,
           ")");

  const int N = static_cast<int>(n), S = static_cast<int>(b.seqs.size());
  p.N = N, p.S = S, p.M = static_cast<int>(m), p.all = all;
  p.at = StepLayout::make(N, lora);
  p.idx.resize(p.at.size);
  int32_t *tok = p.section(p.at.tok), *slot = p.section(p.at.slot), *pos = p.section(p.at.pos);
  int32_t *first = p.section(p.at.first), *row = p.section(p.at.row);
  int32_t* pick = p.section(p.at.pick);  // (M)
  std::copy_n(b.tokens.begin(), N, tok);
  int r = 0, n_decode = 0, n_few = 0, k = 0;
  for (int i = 0; i < S; i++) {
    const auto& s = b.seqs[i];
    n_decode += s.n_new == 1;
    n_few += s.n_new <= kFewRows ? s.n_new : 0;
    for (int j = 0; j < s.n_new; j++, r++) {
      slot[r] = s.slot, pos[r] = s.n_past + j;
      first[r] = s.row_offset, row[r] = s.row_offset + s.n_past + j;
    }
    if (!all)
      for (int j = s.n_logits; j > 0; j--) pick[k++] = r - j;
  }
  p.n_decode = n_decode, p.n_few = n_few;
  int32_t *few = p.section(p.at.by_kind), *pre = few + n_few;
  r = 0;
  for (const auto& s : b.seqs)
    for (int j = 0; j < s.n_new; j++, r++) *(s.n_new <= kFewRows ? few++ : pre++) = r;
  p.sampling = {}, p.masks = {};
  p.mask_rows.clear();
}

// Adds forward_pick's sampling to a built plan: (M) rows, each checked, and the masks they
// name, (n, ceil(V / 32)) words named in row order.
inline void plan_sampling(StepPlan& p, std::span<const RowSampling> rows,
                          std::span<const uint32_t> masks, int V) {
  const std::size_t M = p.M;
  if (rows.size() != M)
    fail("forward_pick: ", p.S, " sequences (", M, " rows of logits) but ", rows.size(),
         " sampling rows");
  const std::size_t W = (V + 31) / 32, n_masks = masks.size() / W;
  if (masks.size() % W != 0)
    fail("forward_pick: ", masks.size(), " mask words, not a multiple of ", W, " per mask");
  p.mask_rows.clear();
  for (std::size_t m = 0; m < M; m++) {
    check_row(rows[m], static_cast<int>(m));
    const int k = rows[m].mask;
    if (k < -1 || k >= static_cast<int>(n_masks))
      fail("forward_pick: row ", m, " names mask ", k, " of ", n_masks);
    if (k >= 0) {
      if (k != static_cast<int>(p.mask_rows.size()))
        fail("forward_pick: masks must be named in row order; row ", m, " names ", k);
      p.mask_rows.push_back(static_cast<int32_t>(m));
    }
  }
  if (p.mask_rows.size() != n_masks)
    fail("forward_pick: ", n_masks, " masks but ", p.mask_rows.size(), " rows name one");
  p.sampling = rows, p.masks = masks;
}

}  // namespace servekit::model
