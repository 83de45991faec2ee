// SPDX-License-Identifier: Apache-2.0
#pragma once
// Contiguous KV cache: every slot reserves max_len rows per layer, whether a sequence uses
// them or not. Simple addressing, wasteful memory: the baseline the paged layout improves on.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "servekit/core/error.hpp"

namespace servekit::kv {

class ContiguousCache {
 public:
  ContiguousCache(int n_layer, int n_embd, int slots, int max_len)
      : n_layer_(n_layer), n_embd_(n_embd), slots_(slots), max_len_(max_len) {
    if (slots < 1) fail("kv cache: slots must be >= 1, got ", slots);
    if (max_len < 1) fail("kv cache: max_len must be >= 1, got ", max_len);
    data_.resize(2 * static_cast<std::size_t>(n_layer) * slots * max_len * n_embd);
    free_.reserve(slots);
    for (int s = slots - 1; s >= 0; s--) free_.push_back(s);
  }

  // (max_len, C) rows of one layer and slot.
  float* k(int layer, int slot) { return data_.data() + offset(layer, slot, 0); }
  float* v(int layer, int slot) { return data_.data() + offset(layer, slot, 1); }

  int slots() const { return slots_; }
  int max_len() const { return max_len_; }
  int n_layer() const { return n_layer_; }
  int n_embd() const { return n_embd_; }
  std::size_t bytes() const { return data_.size() * sizeof(float); }
  // 2 (K and V) x layers x d_model x bytes per element: the cost of one cached token.
  std::size_t bytes_per_token() const { return 2ull * n_layer_ * n_embd_ * sizeof(float); }

  // Slot bookkeeping for schedulers: an exhausted cache is an error, never a silent overwrite.
  int acquire() {
    if (free_.empty()) fail("kv cache: all ", slots_, " slots are in use");
    int s = free_.back();
    free_.pop_back();
    return s;
  }
  void release(int slot) {
    if (slot < 0 || slot >= slots_)
      fail("kv cache: release of slot ", slot, " outside [0, ", slots_, ")");
    free_.push_back(slot);
  }
  int free_slots() const { return static_cast<int>(free_.size()); }

 private:
  std::size_t offset(int layer, int slot, int kv) const {
    // (L, 2, S, T, C)
    return ((((static_cast<std::size_t>(layer) * 2 + kv) * slots_ + slot) * max_len_) * n_embd_);
  }
  int n_layer_, n_embd_, slots_, max_len_;
  std::vector<float> data_;
  std::vector<int> free_;
};

}  // namespace servekit::kv
