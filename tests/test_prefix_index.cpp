// SPDX-License-Identifier: Apache-2.0
// Prefix caching's bookkeeping, below the engine: the block pool's reference counts and its
// least-recently-released order of cached blocks, and the paged cache's named blocks. A hit
// must never hand a sequence a block holding other rows, however often hashes collide; no
// block may leak (free + held = pool, cached free blocks counted as free).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "servekit/kv/block_allocator.hpp"
#include "servekit/kv/paged_cache.hpp"
#include "servekit/kv/policy.hpp"

namespace sk = servekit;
using Catch::Contains;

namespace {
constexpr int B = 4;
using Cache = sk::kv::PagedCache<sk::kv::Paged<B>>;

// What each block's rows hold, as the test wrote them: (token, adapter key) per row.
struct Shadow {
  std::map<int32_t, std::vector<std::pair<int32_t, int32_t>>> rows;
  void write(const Cache& c, int slot, std::span<const int32_t> t, int from, int32_t key) {
    const auto table = c.block_table(slot);
    for (int r = from; r < static_cast<int>(t.size()); r++) {
      auto& b = rows[table[r / B]];
      b.resize(B);
      b[r % B] = {t[r], key};
    }
  }
  // The slot's first n rows hold t's first n tokens under key.
  bool holds(const Cache& c, int slot, std::span<const int32_t> t, int n, int32_t key) const {
    const auto table = c.block_table(slot);
    for (int r = 0; r < n; r++) {
      auto it = rows.find(table[r / B]);
      if (it == rows.end() || it->second[r % B] != std::pair{t[r], key}) return false;
    }
    return true;
  }
};

// Blocks some slot holds, each once.
int held_blocks(const Cache& c, const std::vector<int>& slots) {
  std::set<int32_t> held;
  for (int s : slots)
    for (int32_t b : c.block_table(s)) held.insert(b);
  return static_cast<int>(held.size());
}
}  // namespace

TEST_CASE("the block pool counts every block once: free + held = pool", "[kv][prefix]") {
  constexpr int N = 24;
  sk::kv::BlockAllocator a(N);
  std::vector<int> refs(N, 0);
  std::vector<bool> cached(N, false);
  std::mt19937 rng(5);
  std::vector<int32_t> got, evicted;
  for (int it = 0; it < 4000; it++) {
    const int op = static_cast<int>(rng() % 5);
    if (op == 0) {
      got.clear(), evicted.clear();
      const int n = static_cast<int>(rng() % 4);
      if (n > a.free_blocks()) {
        REQUIRE_THROWS_WITH(a.allocate(n, got, &evicted), Contains("out of blocks"));
        CHECK(got.empty());
        continue;
      }
      a.allocate(n, got, &evicted);
      for (int32_t b : evicted) {
        CHECK(cached[b]);  // only cached free blocks are evicted...
        cached[b] = false;
      }
      for (int32_t b : got) {
        CHECK(refs[b] == 0);
        refs[b] = 1;
      }
    } else {
      const int32_t b = static_cast<int32_t>(rng() % N);
      if (op == 1 && refs[b] > 0) a.free(b), refs[b]--;
      if (op == 2 && (refs[b] > 0 || cached[b])) a.share(b), refs[b]++;
      if (op == 3 && refs[b] > 0) a.set_cached(b, true), cached[b] = true;
      if (op == 4 && cached[b] && rng() % 4 == 0) a.set_cached(b, false), cached[b] = false;
    }
    int free = 0, cached_free = 0, n_cached = 0;
    for (int b = 0; b < N; b++) {
      free += refs[b] == 0, cached_free += refs[b] == 0 && cached[b], n_cached += cached[b];
      REQUIRE(a.refs(b) == refs[b]);
    }
    REQUIRE(a.free_blocks() == free);
    REQUIRE(a.cached_free_blocks() == cached_free);
    REQUIRE(a.cached_blocks() == n_cached);
  }
  // ...and only when no never-cached block is left, least recently released first.
  sk::kv::BlockAllocator p(4);
  got.clear(), evicted.clear();
  p.allocate(4, got);
  for (int32_t b : got) p.set_cached(b, true);
  p.free(got[2]), p.free(got[0]), p.free(got[3]);
  std::vector<int32_t> one;
  p.allocate(1, one, &evicted);
  p.allocate(1, one, &evicted);
  CHECK(evicted == std::vector<int32_t>{got[2], got[0]});
  CHECK(p.cached_free_blocks() == 1);
  CHECK(p.evict_oldest() == got[3]);
  CHECK(p.evict_oldest() == -1);

  sk::kv::BlockAllocator e(2);
  REQUIRE_THROWS_WITH(e.share(0), Contains("block 0 is free, not cached"));
  REQUIRE_THROWS_WITH(e.share(5), Contains("block 5 shared is outside the pool of 2"));
  REQUIRE_THROWS_WITH(e.set_cached(1, true), Contains("block 1 is free: its rows are gone"));
}

TEST_CASE("a cached prefix is shared, kept after release, and evicted oldest block first",
          "[kv][prefix]") {
  Cache c(1, 2, 4, 16, 8);  // 4 slots of up to 16 rows (4 blocks), 8 blocks in the pool
  c.enable_prefix_cache();
  const std::vector<int32_t> a{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
  const int32_t base = c.adapter_key("");
  int s0 = c.acquire();
  CHECK(c.map_prefix(s0, a, base, 12) == 0);  // nothing cached yet
  const sk::kv::Reserve r0{s0, 13};
  c.reserve(std::span(&r0, 1));
  c.publish(s0, a, base);  // rows 0..12: three full blocks named, the fourth is not full
  CHECK(c.cached_blocks() == 3);
  CHECK(c.lookup(a, base, 13).tokens == 12);
  CHECK(c.lookup(a, base, 12).tokens == 12);
  CHECK(c.lookup(a, base, 11).tokens == 8);                     // the last token is always computed
  CHECK(c.lookup(a, c.adapter_key("lora-x"), 13).tokens == 0);  // another adapter's K, V
  CHECK(c.lookup(a, c.find_adapter_key("never-seen"), 13).tokens == 0);

  // A second sequence with the same first 9 tokens shares two blocks while the first runs.
  std::vector<int32_t> b(a.begin(), a.begin() + 9);
  b.push_back(99);
  int s1 = c.acquire();
  CHECK(c.map_prefix(s1, b, base, 9) == 8);
  CHECK(c.length(s1) == 8);
  CHECK(c.block_table(s1)[0] == c.block_table(s0)[0]);
  CHECK(c.block_refs(c.block_table(s0)[0]) == 2);
  CHECK(c.free_blocks() == 4);  // 8 - s0's 4 (s1's two are s0's)
  REQUIRE_THROWS_WITH(c.map_prefix(s1, b, base, 9), Contains("already holds 8 tokens"));
  REQUIRE_THROWS_WITH(c.publish(s1, a, base), Contains("publish of 13 tokens in slot 1"));

  // Released, the blocks stay cached and count as free.
  const int32_t last = c.block_table(s0)[2];
  c.release(s0);
  c.release(s1);
  CHECK(c.free_blocks() == 8);
  CHECK(c.cached_free_blocks() == 3);
  // The pool fills: never-cached blocks go first, then the least recently released cached one,
  // the prefix's last block (released first).
  int s2 = c.acquire(), s3 = c.acquire();
  const sk::kv::Reserve fill[] = {{s2, 16}, {s3, 5}};
  c.reserve(fill);  // 4 + 2 blocks: all 5 never-cached, then one cached
  CHECK(c.lookup(a, base, 13).tokens == 8);
  CHECK(std::find(c.block_table(s3).begin(), c.block_table(s3).end(), last) !=
        c.block_table(s3).end());
  c.release(s2), c.release(s3);
  CHECK(c.free_blocks() == 8);

  // A bound on cached free blocks keeps the most recently released (a prefix's first).
  Cache d(1, 2, 2, 16, 8);
  d.enable_prefix_cache(1);
  int t0 = d.acquire();
  const sk::kv::Reserve r{t0, 13};
  d.reserve(std::span(&r, 1));
  d.publish(t0, a, base);
  d.release(t0);
  CHECK(d.cached_blocks() == 1);
  CHECK(d.lookup(a, base, 13).tokens == 4);
}

TEST_CASE("a hit is checked on tokens, adapter and parent, never on the hash alone",
          "[kv][prefix]") {
  // Few token values, three adapters and short random prompts: many true shares; with the
  // hash cut to 2 bits, most lookups also meet a block of other rows under the same hash.
  static const char* const kAdapters[] = {"", "", "a0", "a1"};
  for (int bits : {64, 2}) {
    INFO("hash bits " << bits);
    Cache c(1, 2, 4, 40, 24);
    c.enable_prefix_cache();
    if (bits < 64) c.prefix_index().narrow_hash_for_test(bits);
    Shadow shadow;
    std::mt19937 rng(bits);
    std::vector<int> live;
    long hits = 0;
    for (int it = 0; it < 3000; it++) {
      if (!live.empty() && (c.free_slots() == 0 || rng() % 3 == 0)) {
        const int k = static_cast<int>(rng() % live.size());
        c.release(live[k]);
        live.erase(live.begin() + k);
      } else {
        std::vector<int32_t> t(5 + rng() % 30);
        for (auto& x : t) x = static_cast<int32_t>(rng() % 2);
        const int32_t key = c.adapter_key(kAdapters[rng() % 4]);
        const int slot = c.acquire();
        const int n = static_cast<int>(t.size());
        const sk::kv::PrefixHit want = c.lookup(t, key, n - 1);
        const int h = c.map_prefix(slot, t, key, n - 1);
        REQUIRE(h == want.tokens);
        REQUIRE(h <= n - 1);
        REQUIRE(shadow.holds(c, slot, t, h, key));  // every mapped row is this prefix's row
        hits += h;
        const sk::kv::Reserve r{slot, n};
        if (c.free_blocks() < (n + B - 1) / B - h / B) {
          c.release(slot);  // the pool is full: this one does not run
          continue;
        }
        c.reserve(std::span(&r, 1));
        shadow.write(c, slot, t, h, key);
        c.publish(slot, t, key);
        live.push_back(slot);
      }
      REQUIRE(c.free_blocks() + held_blocks(c, live) == c.n_blocks());
    }
    if (bits == 64) CHECK(hits > 500);
  }
}
