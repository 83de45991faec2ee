// SPDX-License-Identifier: Apache-2.0
#pragma once
// The pool of fixed-size cache blocks. A block is free, held (by one or more sequences: a
// shared prefix, counted by reference), or cached: nobody holds it but its rows are known
// (kv/prefix_index.hpp) and a later request may take it back. Cached blocks count as free:
// allocation takes never-cached free blocks first and then evicts cached ones, least recently
// released first (vLLM's free block queue). Allocation is all-or-nothing, so a request the
// pool cannot satisfy changes nothing and the caller can retry, wait or preempt.
#include <cstdint>
#include <vector>

#include "servekit/core/error.hpp"

namespace servekit::kv {

class BlockAllocator {
 public:
  explicit BlockAllocator(int n_blocks)
      : n_blocks_(n_blocks),
        refs_(n_blocks > 0 ? n_blocks : 0, 0),
        cached_(n_blocks > 0 ? n_blocks : 0, 0),
        prev_(n_blocks > 0 ? n_blocks + 1 : 0, -1),
        next_(n_blocks > 0 ? n_blocks + 1 : 0, -1) {
    if (n_blocks < 1) fail("kv block allocator: n_blocks must be >= 1, got ", n_blocks);
    free_.reserve(n_blocks);
    // Handed out lowest id first: neighbouring sequences get neighbouring blocks.
    for (int b = n_blocks - 1; b >= 0; b--) free_.push_back(b);
    prev_[n_blocks_] = next_[n_blocks_] = n_blocks_;  // the LRU list's sentinel
  }

  // Appends n block ids, each held once, or throws without taking any. Cached blocks taken
  // for lack of free ones are appended to *evicted (their owner must forget their rows).
  void allocate(int n, std::vector<int32_t>& out, std::vector<int32_t>* evicted = nullptr) {
    if (n > free_blocks())
      fail("kv cache: out of blocks: the step needs ", n, " more blocks, ", free_blocks(), " of ",
           n_blocks_, " are free");
    for (int i = 0; i < n; i++) {
      int32_t b;
      if (!free_.empty()) {
        b = free_.back();
        free_.pop_back();
      } else {
        b = oldest_cached();
        uncache(b);
        free_.pop_back();  // uncache() put it there
        if (evicted) evicted->push_back(b);
      }
      refs_[b] = 1;
      out.push_back(b);
    }
  }

  // One more holder of a held or cached block (a cached one is no longer free).
  void share(int32_t b) {
    check(b, "shared");
    if (refs_[b] == 0) {
      if (!cached_[b])
        fail("kv block allocator: block ", b, " is free, not cached: nothing to share");
      unlink(b);
    }
    refs_[b]++;
  }

  // One holder less. At zero the block is free again, or cached (the newest in the LRU order)
  // if its rows are marked as known.
  void free(int32_t b) {
    if (b < 0 || b >= n_blocks_ || refs_[b] == 0)
      fail("kv block allocator: block ", b, " is not allocated (pool of ", n_blocks_, ")");
    if (--refs_[b] > 0) return;
    if (cached_[b])
      link_newest(b);
    else
      free_.push_back(b);
  }

  // The block's rows are known (a held block becomes cached when released) or no longer are.
  void set_cached(int32_t b, bool on) {
    check(b, "marked");
    if (cached_[b] == on) return;
    if (!on && refs_[b] == 0) {
      uncache(b);
      return;
    }
    if (on && refs_[b] == 0) fail("kv block allocator: block ", b, " is free: its rows are gone");
    cached_[b] = on;
    n_cached_ += on ? 1 : -1;
  }

  // Makes the least recently released cached block a plain free block; returns it (-1: none
  // is cached and free).
  int32_t evict_oldest() {
    const int32_t b = oldest_cached();
    if (b >= 0) uncache(b);
    return b;
  }

  int free_blocks() const { return static_cast<int>(free_.size()) + n_lru_; }
  int cached_free_blocks() const { return n_lru_; }  // cached and held by nobody
  int cached_blocks() const { return n_cached_; }    // cached, held or not
  int refs(int32_t b) const { return refs_.at(b); }
  bool cached(int32_t b) const { return cached_.at(b) != 0; }
  int n_blocks() const { return n_blocks_; }

 private:
  void check(int32_t b, const char* what) const {
    if (b < 0 || b >= n_blocks_)
      fail("kv block allocator: block ", b, " ", what, " is outside the pool of ", n_blocks_);
  }
  int32_t oldest_cached() const { return n_lru_ > 0 ? next_[n_blocks_] : -1; }
  // A cached block nobody holds: out of the LRU list and the cache, onto the free list.
  void uncache(int32_t b) {
    unlink(b);
    cached_[b] = 0;
    n_cached_--;
    free_.push_back(b);
  }
  void link_newest(int32_t b) {
    const int32_t s = n_blocks_, last = prev_[s];
    prev_[b] = last, next_[b] = s;
    next_[last] = b, prev_[s] = b;
    n_lru_++;
  }
  void unlink(int32_t b) {
    next_[prev_[b]] = next_[b], prev_[next_[b]] = prev_[b];
    prev_[b] = next_[b] = -1;
    n_lru_--;
  }

  int n_blocks_;
  std::vector<int32_t> refs_;    // (n_blocks) holders; double frees are errors
  std::vector<uint8_t> cached_;  // (n_blocks) rows known to the prefix index
  std::vector<int32_t> free_;    // never-cached (or evicted) free blocks
  // Cached blocks nobody holds, oldest release first: a doubly linked list over block ids
  // with the sentinel n_blocks, so taking one back from the middle costs O(1).
  std::vector<int32_t> prev_, next_;  // (n_blocks + 1)
  int n_lru_ = 0, n_cached_ = 0;
};

}  // namespace servekit::kv
