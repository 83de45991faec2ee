// SPDX-License-Identifier: Apache-2.0
#pragma once
// StepBatch: the engine's step turned into the model's input. From the scheduler's Work list it
// builds the ragged model::Batch: each sequence's new tokens (a static batch's left pads in front
// of its first chunk; one pad token for a ghost), its cache slot, rows and adapter, and for
// device sampling each row's sampling parameters and the token masks of constrained rows. A
// speculating sequence's draft follows its uncached token and brings a row of logits per
// proposed token (the row after each one). A request that wants its prompt's log-probabilities
// gets a row of logits for every token of a chunk that holds prompt positions, the last of them
// the row it samples from. The row each Work item samples from (and of the picked ids), and the
// first of its prompt rows, are kept for the update after the step.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "servekit/core/row_sampling.hpp"
#include "servekit/model/batch.hpp"
#include "servekit/serve/sched/core.hpp"

namespace servekit::serve {

class StepBatch {
 public:
  // Builds the step of `plan`. sampling: device sampling (rows and masks); mask_words: words
  // of one token mask, ceil(V / 32); late_masks: the masks are written by the batch's
  // late_masks while the forward runs (write_masks), not here. Counts prompt and pad tokens in
  // c.
  void build(std::span<const Work> plan, int32_t pad_id, bool sampling, int mask_words, Counters& c,
             bool late_masks = false) {
    tokens_.clear(), seqs_.clear(), adapters_.clear(), rows_.clear(), masks_.clear();
    late_.clear();
    mask_words_ = mask_words;
    out_row_.clear(), prompt_row_.clear();
    n_rows_ = 0;
    with_logits_ = !sampling;
    for (const Work& w : plan) {
      Seq& s = *w.seq;
      if (w.pad > 0) {
        seqs_.push_back({s.slot, 0, w.pad, 0});
        adapters_.push_back(-1);
        tokens_.insert(tokens_.end(), w.pad, pad_id);
        c.padded_tokens += w.pad;
        if (sampling) rows_.push_back({});
        n_rows_++;
      }
      const int d = static_cast<int>(s.draft.size());
      // Every row's logits: the chunk holds prompt positions not scored yet.
      const bool prompt_rows = !s.ghost && d == 0 && s.st->scores_prompt(s.n_cached, w.n_new);
      const int n_logits = prompt_rows ? w.n_new : 1 + d;
      prompt_row_.push_back(prompt_rows ? n_rows_ : -1);
      out_row_.push_back(prompt_rows ? n_rows_ + w.n_new - 1 : n_rows_);
      seqs_.push_back({s.slot, s.n_cached, w.n_new, s.row_offset, n_logits});
      adapters_.push_back(s.adapter);
      n_rows_ += n_logits;
      with_logits_ |= prompt_rows;
      if (s.ghost) {
        tokens_.push_back(pad_id);
        c.padded_tokens++;
      } else {
        const auto& t = s.st->tokens();
        const int own = w.n_new - d;  // of its uncached tokens
        tokens_.insert(tokens_.end(), t.begin() + s.n_cached, t.begin() + s.n_cached + own);
        tokens_.insert(tokens_.end(), s.draft.begin(), s.draft.end());
        if (s.n_cached < s.st->prompt_len())
          c.prompt_tokens += std::min(own, s.st->prompt_len() - s.n_cached);
      }
      if (!sampling) continue;
      if (prompt_rows) rows_.insert(rows_.end(), w.n_new - 1, RowSampling{});  // greedy, unused
      rows_.push_back(s.ghost ? RowSampling{} : s.st->sampling_row());
      for (int j = 1; j <= d; j++) rows_.push_back(s.st->sampling_row(j));
      with_logits_ |= s.st->request().top_logprobs > 0;
      // A constrained row that samples this step (not a prompt chunk) brings its mask. (The
      // engine proposes no draft for it: the later rows' masks depend on the tokens accepted.)
      if (!s.ghost && s.uncached() == w.n_new - d && s.st->constraint() &&
          s.st->request().stop.max_new_tokens > 0) {
        rows_[rows_.size() - 1 - d].mask = static_cast<int32_t>(masks_.size() / mask_words);
        if (late_masks) {
          late_.push_back(s.st.get());
          masks_.resize(masks_.size() + mask_words);
        } else {
          const uint32_t* m = s.st->next_mask();
          masks_.insert(masks_.end(), m, m + mask_words);
        }
      }
    }
  }

  model::Batch batch() {
    model::Batch b{tokens_, seqs_, model::Logits::Last, adapters_, rows_, masks_};
    if (!late_.empty()) b.late_masks = {&StepBatch::write_masks, this};
    return b;
  }
  // The row of the step's logits (and ids) plan[i] samples from (with a draft, the first).
  int row(std::size_t i) const { return out_row_[i]; }
  // The row of plan[i]'s first new token when every one of its rows has logits (its prompt's
  // log-probabilities), else -1.
  int prompt_row(std::size_t i) const { return prompt_row_[i]; }
  int rows() const { return n_rows_; }
  int tokens() const { return static_cast<int>(tokens_.size()); }  // the step's input rows
  // Whether the step must bring its logits back: the host samples from them, or a request
  // wants its top logprobs.
  bool with_logits() const { return with_logits_; }

 private:
  std::vector<int32_t> tokens_;
  std::vector<model::SeqStep> seqs_;
  std::vector<int32_t> adapters_;  // (seqs_) each one's adapter slot, -1: none
  std::vector<RowSampling> rows_;
  // The masks of the constrained rows that sample, written by build or, for late masks, by
  // write_masks from late_'s requests, in row order.
  static void write_masks(void* self) {
    auto& b = *static_cast<StepBatch*>(self);
    const std::size_t W = b.mask_words_;
    for (std::size_t i = 0; i < b.late_.size(); i++)
      std::copy_n(b.late_[i]->next_mask(), W, b.masks_.data() + i * W);
  }

  std::vector<uint32_t> masks_;      // (constrained rows, mask words) this step's token masks
  std::vector<RequestState*> late_;  // late masks: each mask's request
  int mask_words_ = 0;
  std::vector<int> out_row_, prompt_row_;
  int n_rows_ = 0;  // rows of logits
  bool with_logits_ = true;
};

}  // namespace servekit::serve
