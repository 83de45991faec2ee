// SPDX-License-Identifier: Apache-2.0
#pragma once
// One query row's heads [h0, h1) at once, key by key (kernels/host/attention.hpp takes it for a
// decode row: a run of one row of its slot). A cache row holds every head's key side by side
// (C floats), so one head's keys are a few lines every C elements; walked head by head, a
// decode step's f32 cache came from memory in 256-byte pieces 3 KB apart, at well under the read
// bandwidth (docs/PERFORMANCE.md). Here each block of kLanes keys (or values) is walked across
// the heads before the next block, so the reads of a block are one contiguous run of the cache.
// Every number is the per-head path's: a block of scores is score_block, the softmax is
// softmax_in_place, and each head's weighted sum is weighted_sum_pairs over the blocks in key
// order, its a and b held in memory between blocks, then weighted_sum_from for the rest: the
// same FMA chains in the same order, so the row's bits do not depend on which path ran.
#include <cstdint>
#include <vector>

#include "servekit/kernels/host/attention_rows.hpp"

namespace servekit::kernels::host {

#if defined(__AVX512F__) || defined(__AVX2__)
// head(h) gives the head's accessors: key(t) and value(t), a cache row's features of the head;
// ks and vs, the int8 cache's scales (or NoScale).
template <class Key, class Value, class KScale, class VScale>
struct HeadView {
  Key key;
  Value value;
  KScale ks;
  VScale vs;
};

template <int NV, class Head>
void row_heads(float* o,        // (C): the row's output; heads [h0, h1) written
               const float* q,  // (C): the row's q
               float* att,      // (h1 - h0, ld): scratch for the heads' scores
               int ld, int t0, int T, int h0, int h1, float scale, const Head& head) {
  constexpr int hd = NV * kLanes;
  const int nh = h1 - h0;
  auto att_of = [&](int h) { return att + static_cast<int64_t>(h - h0) * ld; };
  int t = t0;
  for (; t + kLanes <= T; t += kLanes)
    for (int h = h0; h < h1; h++) {
      auto v = head(h);
      vec qv[NV];
      for (int i = 0; i < NV; i++) qv[i] = load(q + h * hd + i * kLanes);
      score_block<NV>(att_of(h), qv, v.key, t, T, scale, v.ks);
    }
  thread_local std::vector<float> inv;
  inv.resize(nh);
  for (int h = h0; h < h1; h++) {
    auto v = head(h);
    scores<NV>(att_of(h), q + h * hd, v.key, t, T, hd, scale, v.ks);  // the keys left
    inv[h - h0] = softmax_in_place(att_of(h), t0, T);
  }
  // The weighted sums: each head's a and b (S vectors a slice, as weighted_sum slices them)
  // kept in acc between blocks of KB values (even, so each block starts on an even key).
  constexpr int S = 2 * NV + 4 > kRegisters && NV % 2 == 0 ? NV / 2 : NV;
  constexpr int KB = kLanes;
  static_assert(KB % 2 == 0);
  thread_local std::vector<vec> acc;  // (nh, NV / S, 2, S)
  acc.assign(static_cast<std::size_t>(nh) * 2 * NV, vec{});
  // Whole blocks, then the keys left (none when KB divides the keys) into o.
  for (t = t0;; t += KB) {
    const bool last = t + KB > T;
    for (int h = h0; h < h1; h++) {
      auto v = head(h);
      for (int f = 0; f < NV; f += S) {
        vec* ab = acc.data() + (static_cast<std::size_t>(h - h0) * NV + f) * 2;
        vec a[S], b[S];
        for (int i = 0; i < S; i++) a[i] = ab[i], b[i] = ab[S + i];
        const Slice<decltype(v.value)> value{v.value, f * kLanes};
        if (last) {
          weighted_sum_from<S>(o + h * hd + f * kLanes, a, b, att_of(h), inv[h - h0], t, T, value,
                               v.vs);
          continue;
        }
        weighted_sum_pairs<S>(a, b, att_of(h), inv[h - h0], t, t + KB, T, value, v.vs);
        for (int i = 0; i < S; i++) ab[i] = a[i], ab[S + i] = b[i];
      }
    }
    if (last) break;
  }
}
#endif

}  // namespace servekit::kernels::host
