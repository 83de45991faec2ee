// SPDX-License-Identifier: Apache-2.0
#pragma once
// Paged KV cache: per layer, a pool of blocks of B rows for K and one for V; each slot owns a
// row of the block table naming the blocks that hold its rows 0, B, 2B, ... A sequence takes
// blocks as it grows and gives them all back on release(), so memory follows the tokens
// actually stored, not max_len per slot. Storage (core/storage.hpp) says where the blocks live;
// the block table is kept on the host for allocation and, under device storage, mirrored to
// the device whenever it changes, so view(l) hands the kernels device pointers only.
//
// With prefix caching on, a full block is named by its contents (kv/prefix_index.hpp) once its
// rows are written: a new sequence maps the longest named run of its tokens' blocks, shared by
// reference count, and a released block stays cached (free, but still named) until the pool
// needs it, least recently released first.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/core/storage.hpp"
#include "servekit/kv/block_allocator.hpp"
#include "servekit/kv/capacity.hpp"
#include "servekit/kv/scales.hpp"
#include "servekit/kv/prefix_index.hpp"
#include "servekit/kv/slots.hpp"
#include "servekit/kv/view.hpp"

namespace servekit::kv {

template <class Policy, Storage S = HostStorage>
class PagedCache {
 public:
  using T = typename Policy::Elem::type;
  static constexpr int B = Policy::block_tokens;

  // n_head: an int8 cache keeps a scale per token and head (one per row when 1).
  PagedCache(int n_layer, int n_embd, int slots, int max_len, int n_blocks, int n_head = 1)
      : n_layer_(n_layer),
        n_embd_(n_embd),
        max_len_(max_len),
        stride_((max_len + B - 1) / B),
        slots_(slots),
        alloc_(check_blocks(n_blocks, max_len)),
        held_(slots, 0),
        table_(static_cast<std::size_t>(slots) * stride_, -1),
        prefix_(n_blocks, B),
        chain_(slots),
        scales_(n_layer, n_embd, n_head) {
    data_.resize(2 * static_cast<std::size_t>(n_layer) * n_blocks * B * n_embd);
    scales_.resize(static_cast<std::size_t>(n_blocks) * B);
    mirror_table();
  }

  // (B, C) rows of one block of one layer.
  T* k_block(int layer, int block) { return data_.data() + offset(layer, block, 0); }
  T* v_block(int layer, int block) { return data_.data() + offset(layer, block, 1); }
  PagedView<T> view(int layer) {
    return {k_block(layer, 0), v_block(layer, 0),  table_data(), stride_, B,
            n_embd_,           scales_.view(layer)};
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
        evicted_.clear();
        alloc_.allocate(add, got, &evicted_);
        for (int32_t e : evicted_) prefix_.erase(e);
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
  std::size_t bytes() const { return data_.size() * sizeof(T) + scales_.bytes(); }
  std::size_t bytes_per_token() const {
    return 2ull * n_layer_ * n_embd_ * sizeof(T) + scales_.bytes_per_token();
  }
  // The same for a cache of these dimensions before one exists (the engine's memory plan).
  static std::size_t token_bytes(int n_layer, int n_embd, int n_head) {
    return 2ull * n_layer * n_embd * sizeof(T) + KvScaleStore<T, S>::token_bytes(n_layer, n_head);
  }

  int acquire() { return slots_.acquire(); }
  // Returns the slot and every block it holds. The last blocks go first, so that a cached
  // prefix's later blocks are evicted before its first ones.
  void release(int slot) {
    slots_.release(slot);
    for (int i = held_[slot] - 1; i >= 0; i--) {
      int32_t& b = table_[static_cast<std::size_t>(slot) * stride_ + i];
      alloc_.free(b);
      b = -1;
    }
    if (held_[slot] > 0) mirror_table();
    held_[slot] = 0;
    chain_[slot] = {};
    while (max_cached_ >= 0 && alloc_.cached_free_blocks() > max_cached_)
      prefix_.erase(alloc_.evict_oldest());
  }
  int free_slots() const { return slots_.free_slots(); }

  // Prefix caching: off until enabled. max_cached: cached blocks that nobody holds kept at
  // most (-1: as many as the pool has room for).
  void enable_prefix_cache(int max_cached = -1) { prefix_on_ = true, max_cached_ = max_cached; }
  bool prefix_cache() const { return prefix_on_; }
  // The key of an adapter id in block names (0: the base model); find: -1 if never named.
  int32_t adapter_key(std::string_view id) { return prefix_.adapter_key(id); }
  int32_t find_adapter_key(std::string_view id) const { return prefix_.find_adapter_key(id); }

  // The longest run of cached blocks that starts tokens (within its first max_tokens) under
  // adapter key a (-1: none); nothing changes.
  PrefixHit lookup(std::span<const int32_t> tokens, int32_t a, int max_tokens) const {
    PrefixHit hit;
    if (!prefix_on_ || a < 0) return hit;
    PrefixLink link;
    const int n = std::min<int>(max_tokens, static_cast<int>(tokens.size())) / B;
    for (int j = 0; j < n; j++) {
      const auto t = tokens.subspan(static_cast<std::size_t>(j) * B, B);
      const int32_t b = prefix_.find(prefix_.hash(link, a, t), link, a, t);
      if (b < 0) break;
      hit.blocks++, hit.evictable += alloc_.refs(b) == 0;
      hit.ids.push_back(b);
      link = prefix_.link(b);
    }
    hit.tokens = hit.blocks * B;
    return hit;
  }
  // Maps lookup()'s run into an empty slot, each block shared rather than copied; returns the
  // tokens the slot now holds.
  int map_prefix(int slot, std::span<const int32_t> tokens, int32_t a, int max_tokens) {
    slots_.check(slot, "map_prefix in");
    if (held_[slot] != 0 || length(slot) != 0)
      fail("kv cache: map_prefix into slot ", slot, ", which already holds ", length(slot),
           " tokens");
    const PrefixHit hit = lookup(tokens, a, max_tokens);
    Chain& c = chain_[slot];
    for (const int32_t b : hit.ids) {
      alloc_.share(b);
      table_[static_cast<std::size_t>(slot) * stride_ + held_[slot]++] = b;
      c.link = prefix_.link(b);
    }
    c.named = hit.blocks;
    if (hit.blocks > 0) {
      slots_.set_length(slot, hit.tokens);
      mirror_table();
    }
    return hit.tokens;
  }
  // Names the slot's full blocks so later sequences may map them. written: the tokens whose
  // rows the slot holds, in row order (from row 0: no left padding); a: its adapter key.
  void publish(int slot, std::span<const int32_t> written, int32_t a) {
    if (!prefix_on_) return;
    Chain& c = chain_.at(slot);
    const int full = static_cast<int>(written.size()) / B;
    if (full > held_[slot] || static_cast<int>(written.size()) > length(slot))
      fail("kv cache: publish of ", written.size(), " tokens in slot ", slot, ", which holds ",
           length(slot));
    for (; c.named >= 0 && c.named < full; c.named++) {
      const int32_t b = table_[static_cast<std::size_t>(slot) * stride_ + c.named];
      const auto t = written.subspan(static_cast<std::size_t>(c.named) * B, B);
      const uint64_t h = prefix_.hash(c.link, a, t);
      if (const int32_t same = prefix_.find(h, c.link, a, t); same >= 0) {
        c.link = prefix_.link(same);  // computed twice at once: the first copy keeps the name
      } else if (prefix_.insert(b, h, c.link, a, t)) {
        alloc_.set_cached(b, true);
        c.link = prefix_.link(b);
      } else {
        c.named = -1;  // a hash collision: this chain cannot be named further
        break;
      }
    }
  }
  int cached_blocks() const { return alloc_.cached_blocks(); }
  int cached_free_blocks() const { return alloc_.cached_free_blocks(); }
  // Holders of a block (tests: leaks and sharing).
  int block_refs(int32_t b) const { return alloc_.refs(b); }
  PrefixIndex& prefix_index() { return prefix_; }

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
  // Prefix caching: the index of named blocks; per slot, how many of its blocks are named
  // (-1: no more can be) and the chain's end; blocks reserve() took from the cache.
  struct Chain {
    int named = 0;
    PrefixLink link;
  };
  bool prefix_on_ = false;
  int max_cached_ = -1;
  PrefixIndex prefix_;
  std::vector<Chain> chain_;  // (slots)
  std::vector<int32_t> evicted_;
  // Device copy of table_ under device storage; unused (empty) on the host.
  typename S::template Vec<int32_t> dtable_;
  typename S::template Vec<T> data_;  // (L, 2, n_blocks, B, C)
  KvScaleStore<T, S> scales_;
};

}  // namespace servekit::kv
