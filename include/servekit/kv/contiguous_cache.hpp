// SPDX-License-Identifier: Apache-2.0
#pragma once
// Contiguous KV cache: every slot reserves max_len rows per layer, whether a sequence uses
// them or not. Simple addressing, wasteful memory: the baseline the paged layout improves on.
// Storage (core/storage.hpp) says where the rows live: host memory, or device memory for the
// Cuda backend; the bookkeeping stays on the host either way.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/core/storage.hpp"
#include "servekit/kv/capacity.hpp"
#include "servekit/kv/scales.hpp"
#include "servekit/kv/slots.hpp"
#include "servekit/kv/view.hpp"

namespace servekit::kv {

template <class Policy, Storage S = HostStorage>
class ContiguousCache {
 public:
  using T = typename Policy::Elem::type;

  // n_head: an int8 cache keeps a scale per token and head (one per row when 1).
  ContiguousCache(int n_layer, int n_embd, int slots, int max_len, int n_head = 1)
      : n_layer_(n_layer),
        n_embd_(n_embd),
        max_len_(max_len),
        slots_(slots),
        scales_(n_layer, n_embd, n_head) {
    if (max_len < 1) fail("kv cache: max_len must be >= 1, got ", max_len);
    const std::size_t rows = static_cast<std::size_t>(slots) * max_len;
    data_.resize(2 * static_cast<std::size_t>(n_layer) * rows * n_embd);
    scales_.resize(rows);
  }

  // (max_len, C) rows of one layer and slot; device memory under device storage.
  T* k(int layer, int slot) { return data_.data() + offset(layer, slot, 0); }
  T* v(int layer, int slot) { return data_.data() + offset(layer, slot, 1); }
  ContiguousView<T> view(int layer) {
    return {k(layer, 0), v(layer, 0), static_cast<int64_t>(max_len_) * n_embd_, n_embd_,
            scales_.view(layer)};
  }

  // Records the rows each slot holds after the coming step. Every row is preallocated, so
  // this only checks and counts; it never fails half-way.
  void reserve(std::span<const Reserve> r) {
    for (const auto& x : r) {
      slots_.check(x.slot, "reserve in");
      if (x.rows > max_len_)
        fail("kv cache: slot ", x.slot, " needs ", x.rows, " rows, more than max_len = ", max_len_);
    }
    for (const auto& x : r) slots_.set_length(x.slot, x.rows);
  }

  Capacity capacity() const {
    Capacity c;
    c.layout = std::string(Policy::name);
    c.bytes_per_token = bytes_per_token();
    c.capacity_tokens = static_cast<long>(slots()) * max_len_;
    c.bytes = bytes();
    c.sequences = slots_.in_use();
    c.reserved_tokens = static_cast<long>(c.sequences) * max_len_;
    c.stored_tokens = slots_.stored();
    return c;
  }

  int slots() const { return slots_.slots(); }
  int max_len() const { return max_len_; }
  int n_layer() const { return n_layer_; }
  int n_embd() const { return n_embd_; }
  int32_t length(int slot) const { return slots_.length(slot); }
  std::size_t bytes() const { return data_.size() * sizeof(T) + scales_.bytes(); }
  // 2 (K and V) x layers x d_model x bytes per element (and an int8 cache's scales): the cost
  // of one cached token.
  std::size_t bytes_per_token() const {
    return 2ull * n_layer_ * n_embd_ * sizeof(T) + scales_.bytes_per_token();
  }
  // The same for a cache of these dimensions before one exists (the engine's memory plan).
  static std::size_t token_bytes(int n_layer, int n_embd, int n_head) {
    return 2ull * n_layer * n_embd * sizeof(T) + KvScaleStore<T, S>::token_bytes(n_layer, n_head);
  }

  int acquire() { return slots_.acquire(); }
  void release(int slot) { slots_.release(slot); }
  int free_slots() const { return slots_.free_slots(); }

 private:
  std::size_t offset(int layer, int slot, int kv) const {
    // (L, 2, S, T, C)
    return (((static_cast<std::size_t>(layer) * 2 + kv) * slots() + slot) * max_len_) * n_embd_;
  }
  int n_layer_, n_embd_, max_len_;
  Slots slots_;
  typename S::template Vec<T> data_;  // (L, 2, slots, max_len, C)
  KvScaleStore<T, S> scales_;
};

}  // namespace servekit::kv
