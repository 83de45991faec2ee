// SPDX-License-Identifier: Apache-2.0
#pragma once
// PrefixIndex: which cache blocks hold which prefix, so a request whose prompt starts with
// rows already computed maps those blocks instead of computing them again.
//
// A full block is named by a hash chain, as vLLM does: hash(parent's hash, adapter, its B
// tokens). A chain suits a paged cache whose unit of sharing is the block anyway; a radix tree
// (SGLang) shares at token granularity, which blocks cannot use without copying rows. The hash
// only finds a candidate: a hit is verified on the block's own tokens, its adapter and its
// parent, named by a serial number that is never reused (a block id is: an evicted parent's id
// may come back holding other rows), so two prefixes with the same hash never share a block.
// The adapter is part of the name because LoRA on c_attn changes K and V; adapters are
// interned to small keys here, compared exactly (0: the base model).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "servekit/core/error.hpp"

namespace servekit::kv {

// Where a chain of full blocks stands: the last block's hash and serial (the root: no block).
struct PrefixLink {
  uint64_t hash = 0x6a09e667f3bcc908ull;
  uint64_t serial = 0;
};

// What a lookup found: the cached run's tokens and blocks, and how many of those blocks nobody
// holds (cached free blocks, which mapping takes out of the free pool).
struct PrefixHit {
  int tokens = 0, blocks = 0, evictable = 0;
  std::vector<int32_t> ids;  // (blocks) the run's blocks, in order
};

class PrefixIndex {
 public:
  PrefixIndex(int n_blocks, int block_tokens)
      : B_(block_tokens),
        entry_(static_cast<std::size_t>(n_blocks)),
        tokens_(static_cast<std::size_t>(n_blocks) * block_tokens) {}

  // The key of an adapter id: the same id always gets the same key ("" and none: 0).
  int32_t adapter_key(std::string_view id) {
    if (id.empty()) return 0;
    auto it = adapters_.find(std::string(id));
    if (it != adapters_.end()) return it->second;
    const int32_t k = static_cast<int32_t>(adapters_.size()) + 1;
    adapters_.emplace(std::string(id), k);
    return k;
  }
  // The key an id has, or -1 if no block was ever cached for it (then nothing can hit).
  int32_t find_adapter_key(std::string_view id) const {
    if (id.empty()) return 0;
    auto it = adapters_.find(std::string(id));
    return it == adapters_.end() ? -1 : it->second;
  }

  // The hash of the block after `parent` holding tokens t (B of them) for adapter key a.
  uint64_t hash(const PrefixLink& parent, int32_t a, std::span<const int32_t> t) const {
    uint64_t h = mix(parent.hash ^ (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32));
    for (int32_t x : t) h = mix(h ^ static_cast<uint32_t>(x));
    return hash_mask_ == ~0ull ? h : (h & hash_mask_);
  }

  // The cached block that continues `parent` with tokens t under adapter a, checked on all
  // three; -1 if there is none. h: hash(parent, a, t).
  int32_t find(uint64_t h, const PrefixLink& parent, int32_t a, std::span<const int32_t> t) const {
    auto it = by_hash_.find(h);
    if (it == by_hash_.end()) return -1;
    const int32_t b = it->second;
    const Entry& e = entry_[b];
    if (e.parent != parent.serial || e.adapter != a) return -1;
    const int32_t* own = tokens_.data() + static_cast<std::size_t>(b) * B_;
    for (int i = 0; i < B_; i++)
      if (own[i] != t[i]) return -1;
    return b;
  }
  PrefixLink link(int32_t b) const { return {entry_.at(b).hash, entry_.at(b).serial}; }
  bool cached(int32_t b) const { return entry_.at(b).serial != 0; }

  // Records that block b holds tokens t after `parent` under adapter a. False when the name is
  // taken (the same rows already cached in another block, or a hash collision): b stays
  // unknown.
  bool insert(int32_t b, uint64_t h, const PrefixLink& parent, int32_t a,
              std::span<const int32_t> t) {
    if (cached(b)) fail("prefix index: block ", b, " is already cached");
    if (static_cast<int>(t.size()) != B_)
      fail("prefix index: a block holds ", B_, " tokens, got ", t.size());
    if (!by_hash_.emplace(h, b).second) return false;
    entry_[b] = {h, next_serial_++, parent.serial, a};
    std::copy(t.begin(), t.end(), tokens_.begin() + static_cast<std::ptrdiff_t>(b) * B_);
    return true;
  }
  // Forgets block b (evicted: its rows will be overwritten).
  void erase(int32_t b) {
    Entry& e = entry_.at(b);
    if (e.serial == 0) return;
    by_hash_.erase(e.hash);
    e = {};
  }

  std::size_t size() const { return by_hash_.size(); }
  // Tests: keep only the hash's low `bits`, so that different prefixes collide often.
  void narrow_hash_for_test(int bits) { hash_mask_ = (uint64_t{1} << bits) - 1; }

 private:
  static uint64_t mix(uint64_t z) {  // splitmix64's finaliser
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  struct Entry {
    uint64_t hash = 0, serial = 0, parent = 0;  // serial 0: not cached
    int32_t adapter = 0;
  };

  int B_;
  std::vector<Entry> entry_;     // (n_blocks)
  std::vector<int32_t> tokens_;  // (n_blocks, B) each cached block's tokens
  std::unordered_map<uint64_t, int32_t> by_hash_;
  std::unordered_map<std::string, int32_t> adapters_;
  uint64_t next_serial_ = 1;
  uint64_t hash_mask_ = ~0ull;
};

}  // namespace servekit::kv
