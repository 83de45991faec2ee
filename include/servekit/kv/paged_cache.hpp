// SPDX-License-Identifier: Apache-2.0
#pragma once
// Paged KV cache: per layer, a pool of blocks of B rows for K and one for V; each slot owns a
// row of the block table naming the blocks that hold its rows 0, B, 2B, ... A sequence takes
// blocks as it grows and gives them all back on release(), so memory follows the tokens
// actually stored, not max_len per slot. Storage (core/storage.hpp) says where the blocks live;
// the block table is kept on the host for allocation and, under device storage, mirrored to
// the device whenever it changes, so view(l) hands the kernels device pointers only.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/core/storage.hpp"
#include "servekit/kv/block_allocator.hpp"
#include "servekit/kv/capacity.hpp"
#include "servekit/kv/slots.hpp"
#include "servekit/kv/view.hpp"

namespace servekit::kv {

template <class Policy, Storage S = HostStorage>
class PagedCache {
 public:
  using T = typename Policy::Elem::type;
  static constexpr int B = Policy::block_tokens;

  PagedCache(int n_layer, int n_embd, int slots, int max_len, int n_blocks)
      : n_layer_(n_layer),
        n_embd_(n_embd),
        max_len_(max_len),
        stride_((max_len + B - 1) / B),
        slots_(slots),
        alloc_(check_blocks(n_blocks, max_len)),
        held_(slots, 0),
        table_(static_cast<std::size_t>(slots) * stride_, -1) {
    data_.resize(2 * static_cast<std::size_t>(n_layer) * n_blocks * B * n_embd);
    mirror_table();
  }

  // (B, C) rows of one block of one layer.
  T* k_block(int layer, int block) { return data_.data() + offset(layer, block, 0); }
  T* v_block(int layer, int block) { return data_.data() + offset(layer, block, 1); }
  PagedView<T> view(int layer) {
    return {k_block(layer, 0), v_block(layer, 0), table_data(), stride_, B, n_embd_};
  }

  // Grows block tables so that each slot holds at least x.rows rows. All-or-nothing: when
  // the pool cannot cover the whole step, nothing is allocated and the error says how many
  // blocks were needed and free.
  void reserve(std::span<const Reserve> r) {
    int need = 0;
    for (const auto& x : r) {
      slots_.check(x.slot, "reserve in");
      if (x.rows > max_len_)
        fail("kv cache: slot ", x.slot, " needs ", x.rows, " rows, more than max_len = ", max_len_);
      need += std::max(0, blocks_for(x.rows) - held_[x.slot]);
    }
    if (need > alloc_.free_blocks())
      fail("kv cache: out of blocks: the step needs ", need, " more blocks of ", B, " tokens, ",
           alloc_.free_blocks(), " of ", alloc_.n_blocks(),
           " are free (release finished sequences or make a larger cache)");
    std::vector<int32_t> got;
    bool grew = false;
    for (const auto& x : r) {
      const int add = blocks_for(x.rows) - held_[x.slot];
      if (add > 0) {
        grew = true;
        got.clear();
        alloc_.allocate(add, got);
        for (int32_t b : got)
          table_[static_cast<std::size_t>(x.slot) * stride_ + held_[x.slot]++] = b;
      }
      slots_.set_length(x.slot, x.rows);
    }
    if (grew) mirror_table();
  }

  Capacity capacity() const {
    Capacity c;
    c.layout = std::string(Policy::name);
    c.bytes_per_token = bytes_per_token();
    c.capacity_tokens = static_cast<long>(alloc_.n_blocks()) * B;
    c.bytes = bytes();
    c.sequences = slots_.in_use();
    c.reserved_tokens = static_cast<long>(alloc_.n_blocks() - alloc_.free_blocks()) * B;
    c.stored_tokens = slots_.stored();
    return c;
  }

  int slots() const { return slots_.slots(); }
  int max_len() const { return max_len_; }
  int n_layer() const { return n_layer_; }
  int n_embd() const { return n_embd_; }
  int n_blocks() const { return alloc_.n_blocks(); }
  int free_blocks() const { return alloc_.free_blocks(); }
  int blocks_held(int slot) const { return held_.at(slot); }
  // The slot's block table row: blocks_held(slot) ids, in row order.
  std::span<const int32_t> block_table(int slot) const {
    return std::span(table_).subspan(static_cast<std::size_t>(slot) * stride_, held_.at(slot));
  }
  int32_t length(int slot) const { return slots_.length(slot); }
  std::size_t bytes() const { return data_.size() * sizeof(T); }
  std::size_t bytes_per_token() const { return 2ull * n_layer_ * n_embd_ * sizeof(T); }

  int acquire() { return slots_.acquire(); }
  // Returns the slot and every block it holds.
  void release(int slot) {
    slots_.release(slot);
    for (int i = 0; i < held_[slot]; i++) {
      int32_t& b = table_[static_cast<std::size_t>(slot) * stride_ + i];
      alloc_.free(b);
      b = -1;
    }
    if (held_[slot] > 0) mirror_table();
    held_[slot] = 0;
  }
  int free_slots() const { return slots_.free_slots(); }

 private:
  static int check_blocks(int n_blocks, int max_len) {
    if (max_len < 1) fail("kv cache: max_len must be >= 1, got ", max_len);
    const int one = (max_len + B - 1) / B;
    if (n_blocks < one)
      fail("kv cache: ", n_blocks, " blocks of ", B, " tokens hold ",
           static_cast<long>(n_blocks) * B,
           " tokens, fewer than one sequence of max_len = ", max_len, " needs (", one, " blocks)");
    return n_blocks;
  }
  // The table the kernels read: the host one itself, or its device copy.
  const int32_t* table_data() const {
    if constexpr (S::is_host)
      return table_.data();
    else
      return dtable_.data();
  }
  // The whole table (slots x ceil(max_len / B) ints: small) after any change; copies are
  // ordered on the default stream after the steps that read the old table.
  void mirror_table() {
    if constexpr (!S::is_host) S::upload(dtable_, std::span<const int32_t>(table_));
  }
  static int blocks_for(int rows) { return (rows + B - 1) / B; }
  std::size_t offset(int layer, int block, int kv) const {
    // (L, 2, n_blocks, B, C)
    return (((static_cast<std::size_t>(layer) * 2 + kv) * alloc_.n_blocks() + block) * B) * n_embd_;
  }

  int n_layer_, n_embd_, max_len_;
  int32_t stride_;  // block table columns: ceil(max_len / B)
  Slots slots_;
  BlockAllocator alloc_;
  std::vector<int> held_;       // (slots) blocks held per slot
  std::vector<int32_t> table_;  // (slots, stride_)
  // Device copy of table_ under device storage; unused (empty) on the host.
  typename S::template Vec<int32_t> dtable_;
  typename S::template Vec<T> data_;  // (L, 2, n_blocks, B, C)
};

}  // namespace servekit::kv
