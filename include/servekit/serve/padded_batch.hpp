// SPDX-License-Identifier: Apache-2.0
#pragma once
// The course's static batch: prompts left-padded to the longest one, an attention mask, and
// position ids = cumsum(mask) - 1 (pads set to 1), as Hugging Face builds them. Every row has
// the same length, so every row occupies Tpad + steps cache rows, pads included: the compute
// and memory that padding wastes. Real tokens get exactly their unpadded result, because the
// model skips a row's pad rows (SeqStep::row_offset) the way the mask does.
//
// Runs on any cache; a paged cache does not need it (a ragged Batch has no pads).
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/model/batch.hpp"

namespace servekit::serve {

class PaddedBatch {
 public:
  // Left-pads prompts with pad_id. slots[i] is the cache slot of row i (default: slot i).
  PaddedBatch(std::span<const std::vector<int32_t>> prompts, int32_t pad_id,
              std::span<const int32_t> slots = {})
      : B_(static_cast<int>(prompts.size())) {
    if (B_ == 0) fail("padded batch: no prompts");
    if (!slots.empty() && slots.size() != prompts.size())
      fail("padded batch: ", slots.size(), " slots for ", prompts.size(), " prompts");
    for (int i = 0; i < B_; i++) {
      if (prompts[i].empty()) fail("padded batch: prompt ", i, " is empty");
      t_pad_ = std::max(t_pad_, static_cast<int>(prompts[i].size()));
    }
    tokens_.assign(static_cast<std::size_t>(B_) * t_pad_, pad_id);
    mask_.assign(tokens_.size(), 0);
    for (int i = 0; i < B_; i++) {
      const int pad = t_pad_ - static_cast<int>(prompts[i].size());
      for (int t = pad; t < t_pad_; t++) {
        tokens_[i * t_pad_ + t] = prompts[i][t - pad];
        mask_[i * t_pad_ + t] = 1;
      }
      pad_.push_back(pad);
      slot_.push_back(slots.empty() ? i : slots[i]);
    }
    // HF: position_ids = attention_mask.cumsum(-1) - 1; position_ids.masked_fill_(mask == 0, 1)
    position_ids_.resize(tokens_.size());
    for (int i = 0; i < B_; i++) {
      int32_t sum = 0;
      for (int t = 0; t < t_pad_; t++) {
        sum += mask_[i * t_pad_ + t];
        position_ids_[i * t_pad_ + t] = mask_[i * t_pad_ + t] ? sum - 1 : 1;
      }
    }
  }

  int rows() const { return B_; }
  int t_pad() const { return t_pad_; }
  int pad(int i) const { return pad_.at(i); }
  int32_t slot(int i) const { return slot_.at(i); }
  // Cache rows each slot holds now: t_pad + decode steps, the same for every row.
  int columns() const { return t_pad_ + steps_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }              // (B, Tpad)
  const std::vector<int32_t>& attention_mask() const { return mask_; }        // (B, Tpad)
  const std::vector<int32_t>& position_ids() const { return position_ids_; }  // (B, Tpad)

  // The whole (B, Tpad) block in one step. Row i is two sequences of slot i: its pads in cache
  // rows 0..pad-1 (computed and stored, never attended to by real tokens) and its prompt at
  // positions 0..T-1 in rows pad..Tpad-1. logits: (B, V) after each row's last token for
  // Logits::Last; (B * Tpad, V) in HF's (B, Tpad) order for Logits::All, pad rows holding
  // meaningless values.
  template <class Model>
  void prefill(Model& model, typename Model::Cache& cache, std::vector<float>& logits,
               model::Logits which = model::Logits::Last) {
    constexpr int V = Model::Dims::vocab;
    if (prefilled_) fail("padded batch: prefill called twice");
    seqs_.clear();
    for (int i = 0; i < B_; i++) {
      if (pad_[i] > 0) seqs_.push_back({slot_[i], 0, pad_[i], 0});
      seqs_.push_back({slot_[i], 0, t_pad_ - pad_[i], pad_[i]});
    }
    model.forward(cache, {tokens_, seqs_, which}, out_);
    prefilled_ = true;
    if (which == model::Logits::All) {
      logits.swap(out_);
      return;
    }
    // One row per sequence came back; keep the real sequences' (the last of each row).
    logits.resize(static_cast<std::size_t>(B_) * V);
    int e = 0;
    for (int i = 0; i < B_; i++) {
      e += pad_[i] > 0 ? 2 : 1;
      std::copy_n(out_.begin() + static_cast<std::ptrdiff_t>(e - 1) * V, V,
                  logits.begin() + static_cast<std::ptrdiff_t>(i) * V);
    }
  }

  // Appends one token per row, HF's decode step: the mask grows a column of ones, so every
  // row's new token lands in cache row columns() and gets position last + 1 = columns() - pad.
  // logits: (B, V).
  template <class Model>
  void decode(Model& model, typename Model::Cache& cache, std::span<const int32_t> next,
              std::vector<float>& logits) {
    if (!prefilled_) fail("padded batch: decode before prefill");
    if (static_cast<int>(next.size()) != B_)
      fail("padded batch: decode got ", next.size(), " tokens for ", B_, " rows");
    seqs_.clear();
    for (int i = 0; i < B_; i++) seqs_.push_back({slot_[i], columns() - pad_[i], 1, pad_[i]});
    model.forward(cache, {next, seqs_, model::Logits::Last}, logits);
    steps_++;
  }

 private:
  int B_ = 0, t_pad_ = 0, steps_ = 0;
  bool prefilled_ = false;
  std::vector<int32_t> tokens_, mask_, position_ids_, pad_, slot_;
  std::vector<model::SeqStep> seqs_;
  std::vector<float> out_;
};

}  // namespace servekit::serve
