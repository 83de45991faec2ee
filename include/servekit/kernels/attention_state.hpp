// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// The one order in which servekit's attention sums, shared by the prefill and the decode
// kernels so that a query row gets the same bits from either: a request's tokens then do not
// depend on whether its rows ran in a decode step, a step beside a prompt, a chunked
// prefill or a recompute after preemption.
//
// A query sees cache rows first..row. They are cut into tiles of 32 rows and splits of
// kSplitRows rows, both counted from `first`. One warp walks a split's tiles in order with an
// online softmax (lane j scores the tile's key j); a split's (max, sum, weighted V) state is
// then merged into the query's total, splits in order, starting from the empty state. The
// prefill kernel merges a split as its tile loop leaves it; the decode kernel gives splits to
// different warps (and blocks) and merges them afterwards. Either way: the same operations on
// the same values.
#include "servekit/kernels/common.hpp"

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {
namespace attn {

constexpr int BK = 32;          // cache rows per tile: one per lane
constexpr int kSplitRows = 64;  // cache rows per split: one warp of the decode kernel each
static_assert(kSplitRows % BK == 0);

inline int splits_for(int rows) {
  return imax(1, ceil_div(rows, kSplitRows));
}

// One query's softmax state over the rows seen so far; lane l holds features l + 32 c.
template <int kDpl>
struct State {
  float m, l, acc[kDpl];
};

template <int kDpl>
__device__ SERVEKIT_SIMT_INLINE State<kDpl> empty_state() {
  State<kDpl> s;
  s.m = -INFINITY, s.l = 0.f;
#pragma unroll
  for (int c = 0; c < kDpl; ++c) s.acc[c] = 0.f;
  return s;
}

// Folds one tile into st (the whole warp calls it). sc: this lane's scaled score, -inf when
// its key is not visible; p_warp: 32 floats of shared memory for the warp; v(j, d): feature d
// of the tile's value j, finite for every j < 32 (0 past the tile's rows).
template <int kHd, int kDpl, class V>
__device__ SERVEKIT_SIMT_INLINE void tile_step(State<kDpl>& st, float sc, float* p_warp, int lane,
                                               V&& v) {
  const float m_new = fmaxf(st.m, warp_max(sc));
  // A tile with no visible key (m_new = -inf) leaves the state as it is: corr = 1, p = 0.
  const float corr = m_new == -INFINITY ? 1.f : expf(st.m - m_new);
  const float pr = sc == -INFINITY ? 0.f : expf(sc - m_new);
  st.l = fmaf(st.l, corr, warp_sum(pr));
  st.m = m_new;
  p_warp[lane] = pr;
  __syncwarp();
#pragma unroll
  for (int c = 0; c < kDpl; ++c) {
    const int d = imin(lane + 32 * c, kHd - 1);  // lanes past head_dim redo the last feature
    float o = st.acc[c] * corr;
#pragma unroll 8
    for (int j = 0; j < BK; ++j) o = fmaf(p_warp[j], v(j, d), o);
    st.acc[c] = o;
  }
  __syncwarp();
}

// The weights that merge a split of max ms into a total of max *mt: total * a + split * b.
// A split that saw no row (ms = -inf) must be skipped by the caller.
struct MergeWeights {
  float a, b;
};
__device__ SERVEKIT_SIMT_INLINE MergeWeights merge_weights(float& mt, float ms) {
  const float m = fmaxf(mt, ms);
  const MergeWeights w{mt == -INFINITY ? 0.f : expf(mt - m), expf(ms - m)};
  mt = m;
  return w;
}
__device__ SERVEKIT_SIMT_INLINE float merged(float total, float split, MergeWeights w) {
  return fmaf(split, w.b, total * w.a);
}

template <int kDpl>
__device__ SERVEKIT_SIMT_INLINE void merge(State<kDpl>& t, const State<kDpl>& s) {
  if (s.m == -INFINITY) return;
  const MergeWeights w = merge_weights(t.m, s.m);
  t.l = merged(t.l, s.l, w);
#pragma unroll
  for (int c = 0; c < kDpl; ++c) t.acc[c] = merged(t.acc[c], s.acc[c], w);
}

}  // namespace attn
}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
