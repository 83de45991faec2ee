// SPDX-License-Identifier: Apache-2.0
#pragma once
// The LoRA delta of one linear, y[r] += scale_a * (x[r] A_a^T) B_a^T for each row r whose
// adapter a = ad[r] adapts it, written three ways (lora/policy.hpp says why). Every adapter
// keeps its own rank: nothing is padded to the largest.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <utility>
#include <span>
#include <vector>

#include "servekit/core/thread_pool.hpp"
#include "servekit/kernels/lora_args.hpp"

namespace servekit::kernels::ref {

using kernels::LoraMats;

namespace detail {
inline bool adapts(std::span<const LoraMats> tab, int32_t a) {
  return a >= 0 && a < static_cast<int32_t>(tab.size()) && tab[a].a;
}
// y (Nout) += scale * B v, v = A x (rank): one row through one adapter.
inline void lora_row(float* y, const float* x, const LoraMats& m, int K, int Nout, float* v) {
  for (int j = 0; j < m.rank; j++) {
    const float* a = m.a + static_cast<int64_t>(j) * K;
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int k = 0; k < K; k++) s += a[k] * x[k];
    v[j] = m.scale * s;
  }
  for (int n = 0; n < Nout; n++) {
    const float* b = m.b + static_cast<int64_t>(n) * m.rank;
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int j = 0; j < m.rank; j++) s += b[j] * v[j];
    y[n] += s;
  }
}
}  // namespace detail

// Loop: for each distinct adapter, the whole batch goes through it and a mask keeps the rows
// that asked for it, as the course's loop does with torch ops.
inline void lora_loop(float* y,           // (N, Nout)
                      const float* x,     // (N, K)
                      const int32_t* ad,  // (N) adapter of each row, -1: none
                      std::span<const LoraMats> tab, int N, int K, int Nout) {
  std::vector<int32_t> distinct(ad, ad + N);
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  std::vector<float> d(static_cast<std::size_t>(N) * Nout);
  for (int32_t a : distinct) {
    if (!detail::adapts(tab, a)) continue;
    std::fill(d.begin(), d.end(), 0.f);
    parallel_for(N, [&](int r) {
      thread_local std::vector<float> v;
      v.resize(tab[a].rank);
      detail::lora_row(d.data() + static_cast<int64_t>(r) * Nout, x + static_cast<int64_t>(r) * K,
                       tab[a], K, Nout, v.data());
    });
    for (int r = 0; r < N; r++)
      if (ad[r] == a)
        for (int n = 0; n < Nout; n++)
          y[static_cast<int64_t>(r) * Nout + n] += d[static_cast<int64_t>(r) * Nout + n];
  }
}

// Gathered (BGMV): each row, in parallel, reads its own adapter's A and B.
inline void lora_gathered(float* y, const float* x, const int32_t* ad,
                          std::span<const LoraMats> tab, int N, int K, int Nout) {
  parallel_for(N, [&](int r) {
    if (!detail::adapts(tab, ad[r])) return;
    const LoraMats& m = tab[ad[r]];
    thread_local std::vector<float> v;
    v.resize(m.rank);
    detail::lora_row(y + static_cast<int64_t>(r) * Nout, x + static_cast<int64_t>(r) * K, m, K,
                     Nout, v.data());
  });
}

// Segmented (SGMV): rows ordered by adapter (a stable sort, so each group keeps batch order);
// each group is one shrink V = X_g A^T (m, rank) and one expand Y_g += scale V B^T, with A and
// B read once per group rather than once per row. Groups write disjoint rows, so with enough
// of them the threads take whole groups; a few large groups are split inside instead.
inline void lora_segmented(float* y, const float* x, const int32_t* ad,
                           std::span<const LoraMats> tab, int N, int K, int Nout) {
  std::vector<int32_t> order(N);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t p, int32_t q) { return ad[p] < ad[q]; });
  std::vector<std::pair<int, int>> groups;  // [s0, s1) in order, adapted rows only
  for (int s0 = 0; s0 < N;) {
    int s1 = s0 + 1;
    while (s1 < N && ad[order[s1]] == ad[order[s0]]) s1++;
    if (detail::adapts(tab, ad[order[s0]])) groups.emplace_back(s0, s1);
    s0 = s1;
  }
  auto run = [&](int s0, int s1, bool split) {
    const LoraMats& m = tab[ad[order[s0]]];
    const int M = s1 - s0;
    std::vector<float> v(static_cast<std::size_t>(M) * m.rank);
    // shrink: V (M, rank) = scale * X_g A^T
    const auto shrink = [&](int i) {
      const float* xr = x + static_cast<int64_t>(order[s0 + i]) * K;
      for (int j = 0; j < m.rank; j++) {
        const float* ar = m.a + static_cast<int64_t>(j) * K;
        float s = 0;
#pragma omp simd reduction(+ : s)
        for (int k = 0; k < K; k++) s += ar[k] * xr[k];
        v[static_cast<std::size_t>(i) * m.rank + j] = m.scale * s;
      }
    };
    // expand: Y_g (M, Nout) += V B^T
    const auto expand = [&](int n) {
      const float* br = m.b + static_cast<int64_t>(n) * m.rank;
      for (int i = 0; i < M; i++) {
        const float* vr = v.data() + static_cast<std::size_t>(i) * m.rank;
        float s = 0;
#pragma omp simd reduction(+ : s)
        for (int j = 0; j < m.rank; j++) s += br[j] * vr[j];
        y[static_cast<int64_t>(order[s0 + i]) * Nout + n] += s;
      }
    };
    if (split) {
      parallel_for(M, shrink);
      parallel_for(Nout, expand);
    } else {
      for (int i = 0; i < M; i++) shrink(i);
      for (int n = 0; n < Nout; n++) expand(n);
    }
  };
  const int G = static_cast<int>(groups.size());
  if (G >= host_threads()) {
    parallel_for(
        G, [&](int g) { run(groups[g].first, groups[g].second, false); }, 1);
  } else {
    for (const auto& [s0, s1] : groups) run(s0, s1, true);
  }
}

}  // namespace servekit::kernels::ref
