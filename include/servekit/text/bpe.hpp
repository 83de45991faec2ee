// SPDX-License-Identifier: Apache-2.0
#pragma once
// Byte-pair merging of one pre-token. A merge table maps an adjacent pair of token ids to
// (rank, merged id); the word starts as one token per byte and the lowest-rank adjacent pair is
// merged until none is left, ties going to the leftmost pair. This is the order Hugging Face's
// BPE model uses (a min-heap on (rank, position)); GPT-2's original "merge every occurrence of
// the best bigram" gives the same result.
#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace servekit::text {

struct Merge {
  int32_t rank;    // line order in merges.txt, lower merges first
  int32_t merged;  // id of the concatenation
};

class MergeTable {
 public:
  void add(int32_t left, int32_t right, Merge m) { table_[key(left, right)] = m; }
  const Merge* find(int32_t left, int32_t right) const {
    auto it = table_.find(key(left, right));
    return it == table_.end() ? nullptr : &it->second;
  }
  size_t size() const { return table_.size(); }
  void reserve(size_t n) { table_.reserve(n); }

 private:
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  std::unordered_map<uint64_t, Merge> table_;
};

// Reused between words so merging allocates nothing once warm.
struct BpeScratch {
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // neighbours in the live list, -1 at the ends
    bool alive;
  };
  struct Candidate {
    int32_t rank, pos, merged;
    // std heap is a max-heap: "greater" = lower rank, then leftmost position.
    bool operator<(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

// Merges a word given as ids (one per byte, in order) and appends the result to out.
inline void bpe_merge(const MergeTable& merges, const int32_t* ids, int32_t n, BpeScratch& s,
                      std::vector<int32_t>& out) {
  if (n == 1) {
    out.push_back(ids[0]);
    return;
  }
  auto& sym = s.symbols;
  auto& heap = s.heap;
  sym.resize(size_t(n));
  heap.clear();
  for (int32_t i = 0; i < n; ++i) sym[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, true};
  auto push = [&](int32_t pos) {
    const int32_t next = sym[pos].next;
    if (next < 0) return;
    if (const Merge* m = merges.find(sym[pos].id, sym[next].id)) {
      heap.push_back({m->rank, pos, m->merged});
      std::push_heap(heap.begin(), heap.end());
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) {
    if (const Merge* m = merges.find(ids[i], ids[i + 1])) heap.push_back({m->rank, i, m->merged});
  }
  std::make_heap(heap.begin(), heap.end());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const BpeScratch::Candidate top = heap.back();
    heap.pop_back();
    BpeScratch::Symbol& left = sym[top.pos];
    if (!left.alive || left.next < 0) continue;
    // Stale entry: the pair at pos changed since it was queued. (A pair with the same merged id
    // is necessarily the same pair, since symbols only grow.)
    const Merge* now = merges.find(left.id, sym[left.next].id);
    if (!now || now->merged != top.merged) continue;
    BpeScratch::Symbol& right = sym[left.next];
    left.id = top.merged;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = top.pos;
    if (left.prev >= 0) push(left.prev);
    push(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace servekit::text
