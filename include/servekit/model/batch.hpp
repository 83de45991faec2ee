// SPDX-License-Identifier: Apache-2.0
#pragma once
// The model's step is batch-shaped: a ragged list of sequences, each appending n_new tokens
// after n_past tokens already in its cache slot. Prefill, decode, the no-cache recompute and
// mixed prefill+decode steps of a continuous batcher are all this one description; request
// state (prompts, sampling, stop rules) stays above it in serve/.
#include <cstdint>
#include <span>

#include "servekit/core/row_sampling.hpp"

namespace servekit::model {

struct SeqStep {
  int32_t slot = 0;    // cache slot that holds this sequence's keys and values
  int32_t n_past = 0;  // tokens already in the slot; the new tokens get positions n_past..
  int32_t n_new = 0;   // tokens this step appends (> 0)
  // Cache row of position 0. Rows before it belong to the slot but not to this sequence:
  // a left-padded batch puts its pad tokens there, and attention never reads them (HF's
  // attention_mask). Cache row of position p = row_offset + p.
  int32_t row_offset = 0;
  // Logits::Last: how many of its last new tokens get logits (1..n_new). One for a decode or
  // a prompt's end; k + 1 for a speculative verify of k proposed tokens.
  int32_t n_logits = 1;
};

// What writes a step's token masks late (Batch::late_masks): a function and its argument, so
// that a Batch stays a view.
struct MaskWriter {
  void (*fn)(void*) = nullptr;
  void* arg = nullptr;
  explicit operator bool() const { return fn != nullptr; }
  void operator()() const { fn(arg); }
  // A writer that calls f(); f must outlive the step.
  template <class F>
  static MaskWriter of(F& f) {
    return {[](void* p) { (*static_cast<F*>(p))(); }, &f};
  }
};

enum class Logits {
  Last,  // per sequence, the logits after its last n_logits new tokens (one by default)
  All,   // one row per new token (scoring a prompt, reference tests)
};

struct Batch {
  std::span<const int32_t> tokens;  // (N) every sequence's new tokens, in sequence order
  std::span<const SeqStep> seqs;    // (S) with sum(n_new) == N
  Logits logits = Logits::Last;
  // (S) the model's adapter slot for each sequence (Gpt2::add_adapter), -1: the base model.
  // Empty: every sequence runs the base model.
  std::span<const int32_t> adapters = {};
  // Device sampling (Gpt2::forward_pick): (M) the sampling of each row of logits, in order, and
  // (n, ceil(V / 32)) the token masks that rows name (RowSampling::mask), in row order.
  std::span<const RowSampling> sampling = {};
  std::span<const uint32_t> masks = {};
  // When set, `masks` (sized and named by the rows already) is written by late_masks() after
  // the step's forward is enqueued and before a mask is read: the host makes the masks while a
  // device computes the logits, so a constrained step costs what an unconstrained one does.
  MaskWriter late_masks = {};
};

}  // namespace servekit::model
