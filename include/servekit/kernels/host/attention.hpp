// SPDX-License-Identifier: Apache-2.0
#pragma once
// Causal self-attention over a KV cache on the host: kernels/ref/attention.hpp's loop (each
// query row attends to its slot's cache rows first[r]..row[r]) in vectors.
//  - scores: q . k as a lane-wise FMA chain over the head dimension and a tree lane sum, as
//    many keys at a time as a vector has lanes (q in registers, the lane sums of all the
//    chains taken together), else four at a time so that four chains are in flight;
//  - softmax: the max, the exponentials (host/vmath.hpp's exp) and their sum in vectors of
//    consecutive keys, counted from the row's first key;
//  - output: p * v added into accumulators that stay in registers (two sets, even and odd
//    keys, so that two FMA chains are in flight), when the head is 1, 2, 4 or 8 vectors wide;
//  - on AVX-512 and AVX2, two neighbouring rows of a prompt chunk are one task, each key and
//    value read once for both (the rows' tasks were bound by the L2's bandwidth, not by the
//    FMAs; on AVX2 a 64-wide head's sums run in slices of the features, host/attention_rows.hpp).
// Each (row, head) is computed in one fixed order that depends only on its own keys (the pieces:
// host/attention_rows.hpp), so a row's output does not depend on the batch around it or on
// which row it was paired with, and prefill and decode rows give the same bits (cached decode
// equals the no-cache recompute bit for bit). An int8 cache's scales (kv::I8) multiply each
// score and each value's weight, in the same place on every path.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "servekit/core/error.hpp"

#include "servekit/core/thread_pool.hpp"
#include "servekit/kernels/host/attention_heads.hpp"
#include "servekit/kernels/host/attention_rows.hpp"
#include "servekit/kernels/ref/attention.hpp"

namespace servekit::kernels::host {

template <ref::KvRowView View>
void attention(float* out,        // (N, C)
               const float* qkv,  // (N, 3C): only q is read
               const View& kv,
               const int32_t* slot,   // (N)
               const int32_t* first,  // (N) first cache row the query may see
               const int32_t* row,    // (N) its own cache row (the last it may see)
               int N, int C, int n_head, int max_rows) {
  const int hd = C / n_head;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const int nv = hd % kLanes == 0 ? hd / kLanes : 0;
  constexpr bool kScaled = std::is_same_v<std::remove_cv_t<typename View::elem_type>, int8_t>;
  if constexpr (kScaled)
    if (kv.scales.group < hd || kv.scales.group % hd != 0)
      fail("kernels::attention: an int8 cache's scale groups (", kv.scales.group,
           " features) must be whole heads of ", hd);
  // Task order: within a run of rows of one slot (a prompt's chunk), the rows of one head are
  // neighbours, so a thread's next task reads the keys and values it has just read (one head of
  // one sequence: a few hundred KB, in L2). Where the pair path runs, two neighbouring rows that
  // start at the same key are one task. A row alone in its run (a decode row) is instead one
  // task per group of heads, walked key by key across them (host/attention_heads.hpp), the
  // heads split into as many groups as keep every thread busy. None of this changes any row's
  // arithmetic.
  const bool pairs = nv > 0 && nv <= kPairMaxNV;
#if defined(__AVX512F__) || defined(__AVX2__)
  const bool across = nv == 1 || nv == 2 || nv == 4 || nv == 8;
#else
  const bool across = false;
#endif
  // The runs of rows of one slot, [runs[i], runs[i + 1]), and how many are a row alone.
  std::vector<int32_t> runs{0};
  for (int r = 1; r <= N; r++)
    if (r == N || slot[r] != slot[r - 1]) runs.push_back(r);
  int alone = 0;
  for (std::size_t i = 0; i + 1 < runs.size(); i++) alone += runs[i + 1] - runs[i] == 1;
  // A cache whose rows are looked up (a paged one's block table): a prompt chunk's run of rows
  // has its keys' offsets looked up once, here, rather than at every access of every task and
  // pass (scores, each slice of the weighted sums, for each row pair and head): those lookups
  // stood between every key and its load, and made a paged cache's prompt chunks ~1.25x the
  // contiguous cache's (docs/PERFORMANCE.md). key_at[key_base[r] + t]: row r's key t.
  constexpr bool kLookup = requires {
    kv.block_table;
  };
  constexpr int64_t kNone = INT64_MIN;
  std::vector<int64_t> key_at, key_base;
  if constexpr (kLookup) {
    key_base.assign(N, kNone);
    for (std::size_t i = 0; i + 1 < runs.size(); i++) {
      const int r0 = runs[i], r1 = runs[i + 1];
      if (r1 == r0 + 1) continue;  // a row alone: a task looks each key up once anyway
      int lo = first[r0], hi = row[r0] + 1;
      for (int r = r0; r < r1; r++) lo = std::min(lo, first[r]), hi = std::max(hi, row[r] + 1);
      for (int r = r0; r < r1; r++) key_base[r] = static_cast<int64_t>(key_at.size()) - lo;
      for (int t = lo; t < hi; t++) key_at.push_back(kv.offset(slot[r0], t));
    }
  }
  // Row r's key t -> its element offset in the cache.
  struct RowAt {
    const View* kv;
    int32_t s;
    const int64_t* table;  // nullptr: looked up at each access
    int64_t base;
    SERVEKIT_FORCE_INLINE int64_t operator()(int t) const {
      if constexpr (kLookup)
        if (table) return table[base + t];
      return kv->offset(s, t);
    }
  };
  auto row_at = [&](int r) {
    if constexpr (kLookup)
      if (key_base[r] != kNone) return RowAt{&kv, slot[r], key_at.data(), key_base[r]};
    return RowAt{&kv, slot[r], nullptr, 0};
  };
  const int groups =
      across && alone > 0 ? std::min(n_head, (4 * host_threads() + alone - 1) / alone) : 1;
  const int group_heads = (n_head + groups - 1) / groups;
  // (r * n_head + h) * 2 + (a pair: rows r and r + 1); or, for a row alone, ~(r * n_head + h0)
  // (heads h0 .. h0 + group_heads)
  std::vector<int32_t> order;
  order.reserve(static_cast<std::size_t>(N) * n_head);
  for (std::size_t i = 0; i + 1 < runs.size(); i++) {
    const int r0 = runs[i], r1 = runs[i + 1];
    if (across && r1 == r0 + 1) {
      for (int h = 0; h < n_head; h += group_heads) order.push_back(~(r0 * n_head + h));
      continue;
    }
    for (int h = 0; h < n_head; h++)
      for (int r = r0; r < r1;) {
        const bool two = pairs && r + 1 < r1 && first[r + 1] == first[r];
        order.push_back((r * n_head + h) * 2 + two);
        r += two ? 2 : 1;
      }
  }
  // A row alone: heads h0 .. h0 + group_heads, key by key across them. Each head's accessors
  // capture by value (they outlive the call that makes them).
  auto heads_task = [&](int r, int h0, float* att) {
#if defined(__AVX512F__) || defined(__AVX2__)
    const int h1 = std::min(n_head, h0 + group_heads);
    const View* view = &kv;
    const RowAt ra = row_at(r);
    auto head = [&](int h) {
      const int64_t off = static_cast<int64_t>(h) * hd;
      auto key = [view, ra, off](int t) { return view->k + ra(t) + off; };
      auto value = [view, ra, off](int t) { return view->v + ra(t) + off; };
      auto at = [view, ra, off](int t) { return view->scales.at(ra(t) + off); };
      auto k_scale = [view, at](int t) { return view->scales.k[at(t)]; };
      auto v_scale = [view, at](int t) { return view->scales.v[at(t)]; };
      if constexpr (kScaled)
        return HeadView<decltype(key), decltype(value), RowScale<decltype(k_scale)>,
                        RowScale<decltype(v_scale)>>{key, value, {k_scale}, {v_scale}};
      else
        return HeadView<decltype(key), decltype(value), NoScale, NoScale>{key, value, {}, {}};
    };
    float* o = out + static_cast<int64_t>(r) * C;
    const float* q = qkv + static_cast<int64_t>(r) * 3 * C;
    const int t0 = first[r], T = row[r] + 1;
    switch (nv) {
      case 1:
        return row_heads<1>(o, q, att, max_rows, t0, T, h0, h1, scale, head);
      case 2:
        return row_heads<2>(o, q, att, max_rows, t0, T, h0, h1, scale, head);
      case 4:
        return row_heads<4>(o, q, att, max_rows, t0, T, h0, h1, scale, head);
      default:
        return row_heads<8>(o, q, att, max_rows, t0, T, h0, h1, scale, head);
    }
#else
    (void)r, (void)h0, (void)att;
#endif
  };
  parallel_for(
      static_cast<int>(order.size()),
      [&](int i) {
        thread_local std::vector<float> row_scores;  // two rows of scores, or a group's, per thread
        const std::size_t need = static_cast<std::size_t>(std::max(2, group_heads)) * max_rows;
        if (row_scores.size() < need) row_scores.resize(need);
        float* att = row_scores.data();
        if (order[i] < 0) return heads_task(~order[i] / n_head, ~order[i] % n_head, att);
        const int r = (order[i] >> 1) / n_head, h = (order[i] >> 1) % n_head;
        const bool two = order[i] & 1;
        const float* q = qkv + static_cast<int64_t>(r) * 3 * C + h * hd;
        const int t0 = first[r], T = row[r] + 1;
        const RowAt ra = row_at(r);
        auto key = [&](int t) { return kv.k + ra(t) + h * hd; };
        auto value = [&](int t) { return kv.v + ra(t) + h * hd; };
        float* o = out + static_cast<int64_t>(r) * C + h * hd;
        // An int8 cache: each key's and value's scale for this head; otherwise none at all.
        auto at = [&](int t) { return kv.scales.at(ra(t) + h * hd); };
        auto k_scale = [&](int t) { return kv.scales.k[at(t)]; };
        auto v_scale = [&](int t) { return kv.scales.v[at(t)]; };
        const auto ks = [&] {
          if constexpr (kScaled)
            return RowScale<decltype(k_scale)>{k_scale};
          else
            return NoScale{};
        }();
        const auto vs = [&] {
          if constexpr (kScaled)
            return RowScale<decltype(v_scale)>{v_scale};
          else
            return NoScale{};
        }();
        auto run = [&]<int NV>() {
          if constexpr (NV > 0 && NV <= kPairMaxNV) {
            if (two) {
              float* att1 = att + max_rows;
              const float* q1 = q + 3 * C;
              const int T1 = row[r + 1] + 1;
              const int t = scores_pair<NV>(att, att1, q, q1, key, t0, T < T1 ? T : T1, scale, ks);
              scores<NV>(att, q, key, t, T, hd, scale, ks);
              scores<NV>(att1, q1, key, t, T1, hd, scale, ks);
              const float inv = softmax_in_place(att, t0, T);
              const float inv1 = softmax_in_place(att1, t0, T1);
              return weighted_sum_pair<NV>(o, o + C, att, att1, inv, inv1, t0, T, T1, value, vs);
            }
          }
          scores<NV>(att, q, key, t0, T, hd, scale, ks);
          const float inv = softmax_in_place(att, t0, T);
          if constexpr (NV > 0)
            weighted_sum<NV>(o, att, inv, t0, T, value, vs);
          else
            weighted_sum_any(o, att, inv, t0, T, hd, value, vs);
        };
        switch (nv) {
          case 1:
            return run.template operator()<1>();
          case 2:
            return run.template operator()<2>();
          case 4:
            return run.template operator()<4>();
          case 8:
            return run.template operator()<8>();
          default:
            return run.template operator()<0>();
        }
      },
      alone > 0 ? 1 : 4);  // a few tasks of whole rows' heads: one at a time
}

}  // namespace servekit::kernels::host
