// SPDX-License-Identifier: Apache-2.0
#pragma once
// The LoRA delta of one linear on the host, y[r] += scale_a (x[r] A_a^T) B_a^T, for the
// Gathered and Segmented dispatches (Loop keeps kernels/ref's whole-batch loop: its waste is
// lesson 6's point). Two passes over the step's adapted rows:
//  - shrink, per row: v[j] = scale * (A[j] . x), a lane-wise FMA chain over K and a tree lane
//    sum (host/attention.hpp's dot);
//  - expand, per row and block of output columns: y[n..n+W) += sum_j v[j] Bt[j][n..n+W), an
//    FMA chain over j in vectors of columns. B is kept transposed, (rank, Nout), by the adapter
//    registry: B's own layout, (Nout, rank), would make every output a rank-long dot product
//    summed across lanes (kernels/ref's expand), which costs more than the bytes it reads.
// Gathered takes the rows in batch order; Segmented takes them grouped by adapter, so the rows
// of one adapter read its A and Bt while they are in cache, and its expand runs a block of
// columns for every row of the group before the next block. The arithmetic of a row depends on
// the row and its adapter only: both dispatches give the same bits, whatever shares the step
// and however the threads split it.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "servekit/core/thread_pool.hpp"
#include "servekit/kernels/host/attention.hpp"  // dot
#include "servekit/kernels/host/simd.hpp"
#include "servekit/kernels/lora_args.hpp"

namespace servekit::kernels::host {

namespace lora_detail {

constexpr int kColumns = 256;  // output columns per expand task

inline bool adapts(const LoraParams& p, int32_t a) {
  return a >= 0 && a < p.n_slots && p.tab[a].a;
}

// v (rank) = scale * A x. Four rows of A at a time, so that four FMA chains are in flight; each
// v[j] is still host/attention.hpp's dot(x, A[j]), the same bits.
inline void shrink(float* v, const float* x, const LoraMats& m, int K) {
  int j = 0;
  for (; j + 4 <= m.rank && K % kLanes == 0; j += 4) {
    const float* a = m.a + static_cast<int64_t>(j) * K;
    vec s0{}, s1{}, s2{}, s3{};
    for (int d = 0; d < K; d += kLanes) {
      const vec xd = load(x + d);
      s0 = madd(xd, load(a + d), s0);
      s1 = madd(xd, load(a + K + d), s1);
      s2 = madd(xd, load(a + 2 * K + d), s2);
      s3 = madd(xd, load(a + 3 * K + d), s3);
    }
    v[j] = m.scale * lane_sum(s0), v[j + 1] = m.scale * lane_sum(s1);
    v[j + 2] = m.scale * lane_sum(s2), v[j + 3] = m.scale * lane_sum(s3);
  }
  for (; j < m.rank; j++) v[j] = m.scale * dot(x, m.a + static_cast<int64_t>(j) * K, K);
}

// y[n0 .. n1) += sum_j v[j] Bt[j][n0 .. n1), each column's sum an FMA chain over j from zero.
inline void expand(float* y, const float* v, const LoraMats& m, int Nout, int n0, int n1) {
  int n = n0;
  for (; n + 2 * kLanes <= n1; n += 2 * kLanes) {
    vec s0{}, s1{};
    for (int j = 0; j < m.rank; j++) {
      const vec vj = vec{} + v[j];
      const float* b = m.bt + static_cast<int64_t>(j) * Nout + n;
      s0 = madd(vj, load(b), s0);
      s1 = madd(vj, load(b + kLanes), s1);
    }
    store(y + n, load(y + n) + s0);
    store(y + n + kLanes, load(y + n + kLanes) + s1);
  }
  for (; n < n1; n++) {
    float s = 0;
    for (int j = 0; j < m.rank; j++) s = madd(v[j], m.bt[static_cast<int64_t>(j) * Nout + n], s);
    y[n] += s;
  }
}

// The shrink of every adapted row (rows[0..n)) into p.v, then the expand by (row, column block).
// Gathered passes the rows in batch order, Segmented grouped by adapter.
inline void run(const LoraParams& p, const int32_t* rows, int n) {
  const int R = std::max(p.max_rank, 1);
  parallel_for(n, [&](int i) {
    const int r = rows[i];
    shrink(p.v + static_cast<int64_t>(r) * R, p.x + static_cast<int64_t>(r) * p.K, p.tab[p.ad[r]],
           p.K);
  });
  const int blocks = (p.Nout + kColumns - 1) / kColumns;
  // Column block outer, rows inner: the rows of one adapter that follow each other reuse the
  // block of Bt they have just read.
  parallel_for(blocks * n, [&](int t) {
    const int b = t / n, r = rows[t % n];
    const int n0 = b * kColumns, n1 = std::min(p.Nout, n0 + kColumns);
    expand(p.y + static_cast<int64_t>(r) * p.Nout, p.v + static_cast<int64_t>(r) * R,
           p.tab[p.ad[r]], p.Nout, n0, n1);
  });
}

}  // namespace lora_detail

// Gathered (BGMV): the adapted rows in batch order, each with its own adapter.
inline void lora_gathered(const LoraParams& p) {
  thread_local std::vector<int32_t> rows;
  rows.clear();
  for (int r = 0; r < p.N; r++)
    if (lora_detail::adapts(p, p.ad[r])) rows.push_back(r);
  lora_detail::run(p, rows.data(), static_cast<int>(rows.size()));
}

// Segmented (SGMV): the adapted rows grouped by adapter (p.order, which the plan built: a stable
// sort by slot).
inline void lora_segmented(const LoraParams& p) {
  thread_local std::vector<int32_t> rows;
  rows.clear();
  for (int s = 0; s < p.n_seg; s++)
    if (lora_detail::adapts(p, p.seg_ad[s]))
      rows.insert(rows.end(), p.order + p.seg_start[s], p.order + p.seg_start[s + 1]);
  lora_detail::run(p, rows.data(), static_cast<int>(rows.size()));
}

}  // namespace servekit::kernels::host
