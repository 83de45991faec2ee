// SPDX-License-Identifier: Apache-2.0
#pragma once
// Free list of fixed-size cache blocks. Allocation is all-or-nothing, so a request the pool
// cannot satisfy changes nothing and the caller can retry, wait or preempt.
#include <cstdint>
#include <vector>

#include "servekit/core/error.hpp"

namespace servekit::kv {

class BlockAllocator {
 public:
  explicit BlockAllocator(int n_blocks) : n_blocks_(n_blocks), used_(n_blocks, 0) {
    if (n_blocks < 1) fail("kv block allocator: n_blocks must be >= 1, got ", n_blocks);
    free_.reserve(n_blocks);
    // Handed out lowest id first: neighbouring sequences get neighbouring blocks.
    for (int b = n_blocks - 1; b >= 0; b--) free_.push_back(b);
  }

  // Appends n block ids to out, or throws without taking any.
  void allocate(int n, std::vector<int32_t>& out) {
    if (n > free_blocks())
      fail("kv cache: out of blocks: the step needs ", n, " more blocks, ", free_blocks(), " of ",
           n_blocks_, " are free");
    for (int i = 0; i < n; i++) {
      const int32_t b = free_.back();
      free_.pop_back();
      used_[b] = 1;
      out.push_back(b);
    }
  }
  void free(int32_t block) {
    if (block < 0 || block >= n_blocks_ || !used_[block])
      fail("kv block allocator: block ", block, " is not allocated (pool of ", n_blocks_, ")");
    used_[block] = 0;
    free_.push_back(block);
  }

  int free_blocks() const { return static_cast<int>(free_.size()); }
  int n_blocks() const { return n_blocks_; }

 private:
  int n_blocks_;
  std::vector<uint8_t> used_;  // double frees are errors, not silent duplicates
  std::vector<int32_t> free_;
};

}  // namespace servekit::kv
