// SPDX-License-Identifier: Apache-2.0
#pragma once
// The LoRA delta of one linear on the host, y[r] += scale_a (x[r] A_a^T) B_a^T, for the
// Gathered and Segmented dispatches (Loop keeps kernels/ref's whole-batch loop: its waste is
// lesson 6's point). Two stages:
//  - shrink, per row: v[j] = scale * (A[j] . x), a lane-wise FMA chain over K and a tree lane
//    sum (host/attention.hpp's dot);
//  - expand, per row and block of output columns: sum_j v[j] Bt[j][n..n+W), an FMA chain over j
//    from zero in vectors of columns. B is kept transposed by the adapter registry, in blocks
//    of kBtCols columns (pack_bt): B's own layout, (Nout, rank), would make every output a
//    rank-long dot product summed across lanes (kernels/ref's expand), which costs more than
//    the bytes it reads, and (rank, Nout) rows 3072 floats apart share one L1 set.
// linear_lora runs the expand inside the linear's epilogue (LoraAdd): each tile, as it stores
// its rows, adds their deltas for its columns, computed into a buffer in L1. A delta matrix
// written, zeroed and read back costs three passes over (N, Nout) floats, which at a 128-token
// prefill weighed more than the adapters' FLOPs. lora_gathered / lora_segmented add into a
// (N, Nout) matrix instead (the backend's lora op, for callers that want the delta alone).
// Gathered takes the rows in batch order; Segmented takes them grouped by adapter, so the rows
// of one adapter share its loads of A (the shrink, in pairs) and of B^T (the fused expand, up to
// four rows a load: the linear stores each task's rows in that order, LoraAdd::store_order).
// The arithmetic of a row depends on the row and its adapter only: both dispatches, fused or
// not, give the same bits, whatever shares the step and however the threads split it.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "servekit/core/thread_pool.hpp"
#include "servekit/core/error.hpp"
#include "servekit/kernels/host/attention.hpp"  // dot
#include "servekit/kernels/host/linear.hpp"
#include "servekit/kernels/host/simd.hpp"
#include "servekit/kernels/lora_args.hpp"
#include "servekit/kernels/lora_bt.hpp"
#include "servekit/kernels/ref/lora.hpp"  // adapts

namespace servekit::kernels::host {

namespace lora_detail {

constexpr int kColumns = 256;  // output columns per expand task

inline bool adapts(const LoraParams& p, int32_t a) {
  return ref::detail::adapts({p.tab, static_cast<std::size_t>(p.n_slots)}, a);
}

// A shrink's output, scale * (A[j] . x), with -0 made +0 (what 0 + v would give; the expands
// once broadcast v[j] so, an add each): a -0 would change a sum's sign of zero only, but the
// vector and the scalar expand must agree to the bit. A select, not 0 + v, which FMA
// contraction would fold into the product.
inline float shrunk(const LoraMats& m, float dot) {
  const float v = m.scale * dot;
  return v == 0.f ? 0.f : v;
}

// v[j .. j + G) = shrunk(A[j .. j + G) x) for each whole group of G rows of A from j: G FMA
// chains, and G streams of A, in flight at once. Each v[j] is host/attention.hpp's dot(x, A[j]),
// the same bits whatever G. Returns the first row left.
template <int G>
int shrink_groups(float* v, const float* x, const LoraMats& m, int K, int j) {
  for (; j + G <= m.rank; j += G) {
    const float* a = m.a + static_cast<int64_t>(j) * K;
    vec s[G] = {};
    for (int d = 0; d < K; d += kLanes) {
      const vec xd = load(x + d);
      for (int i = 0; i < G; i++) s[i] = madd(xd, load(a + i * K + d), s[i]);
    }
    for (int i = 0; i < G; i++) v[j + i] = shrunk(m, lane_sum(s[i]));
  }
  return j;
}

// v (rank) = shrunk(A x): rows of A eight at a time, then four, then one by one. A core reads
// A faster with more of its rows streaming at once: eight over four took a decode step's shrink
// (64 own adapters) from 10.1 to 9.4 ms on one thread and from 5.9 to 5.6 on two, within 4% of
// a plain sum of the same bytes (docs/PERFORMANCE.md); sixteen, which leaves AVX-512 short of
// registers for the rows' addresses, no faster than eight.
inline void shrink(float* v, const float* x, const LoraMats& m, int K) {
  int j = 0;
  if (K % kLanes == 0) j = shrink_groups<4>(v, x, m, K, shrink_groups<8>(v, x, m, K, 0));
  for (; j < m.rank; j++) v[j] = shrunk(m, dot(x, m.a + static_cast<int64_t>(j) * K, K));
}

// B^T's element (j, n) in its packed blocks (LoraMats::bt); a vector at a column n that is a
// multiple of kLanes lies within one block.
inline const float* bt_at(const LoraMats& m, int j, int n) {
  return m.bt + (static_cast<int64_t>(n / kBtCols) * m.rank + j) * kBtCols + n % kBtCols;
}
static_assert(kBtCols % kLanes == 0, "a vector of B^T's columns lies within one block");
// The expand's column starts are run's blocks of kColumns, the fused linear's panels and strips
// (multiples of kNR) and the one-row gemv's bands (edges on multiples of kBandFloats,
// matmul.hpp): each a whole number of vectors, so bt_at's vectors stay in a block.
static_assert(kColumns % kLanes == 0 && kNR % kLanes == 0 && kBandFloats % kLanes == 0,
              "expand starts on a vector");

// y[0 .. n1 - n0) += sum_j v[j] Bt[j][n0 .. n1) (y: the row's output at column n0), each
// column's sum an FMA chain over j from zero (the scalar tail's std::fma is the vector FMA).
inline void expand(float* y, const float* v, const LoraMats& m, int n0, int n1) {
  int n = n0;
  for (; n + 2 * kLanes <= n1; n += 2 * kLanes) {
    vec s0{}, s1{};
    for (int j = 0; j < m.rank; j++) {
      const vec vj = broadcast(v + j);
      s0 = madd(vj, load(bt_at(m, j, n)), s0);
      s1 = madd(vj, load(bt_at(m, j, n + kLanes)), s1);
    }
    float* o = y + (n - n0);
    store(o, load(o) + s0);
    store(o + kLanes, load(o + kLanes) + s1);
  }
  for (; n < n1; n++) {
    float s = 0;
    for (int j = 0; j < m.rank; j++) s = madd(v[j], *bt_at(m, j, n), s);
    y[n - n0] += s;
  }
}

// Vectors of columns expand_rows takes per pass: KR x kExpandVecs accumulators.
constexpr int kExpandVecs = kRegisters == 32 ? 4 : 2;

// The deltas of KR rows of one adapter (y: KR rows ldy apart; v[r]: row r's shrink) written to
// y, not added: each value 0 + the sum, a zeroed row's bits after expand, without zeroing the
// rows first and reading them back (a store, a load and a store more per vector). Each load of
// Bt feeds KR rows' FMAs; every column's sum is still the chain over j from zero.
template <int KR>
void expand_rows(float* y, int ldy, const float* const* v, const LoraMats& m, int n0, int n1) {
  constexpr int CW = kExpandVecs;
  int n = n0;
  for (; n + CW * kLanes <= n1; n += CW * kLanes) {
    vec s[KR][CW] = {};
    for (int j = 0; j < m.rank; j++) {
      vec b[CW];
      for (int c = 0; c < CW; c++) {
        b[c] = load(bt_at(m, j, n + c * kLanes));
        if constexpr (KR > 1) in_register(b[c]);  // one load for the KR rows
      }
      for (int r = 0; r < KR; r++) {
        const vec vj = broadcast(v[r] + j);
        for (int c = 0; c < CW; c++) s[r][c] = madd(vj, b[c], s[r][c]);
      }
    }
    for (int r = 0; r < KR; r++) {
      float* o = y + r * ldy + (n - n0);
      for (int c = 0; c < CW; c++) store(o + c * kLanes, vec{} + s[r][c]);
    }
  }
  for (int r = 0; r < KR; r++) {
    float* o = y + r * ldy + (n - n0);
    std::fill(o, o + (n1 - n), 0.f);
    expand(o, v[r], m, n, n1);
  }
}

// shrink for two rows of one adapter at once (v0, x0 and v1, x1): each load of A feeds both
// rows. Every v[j] is still dot(x, A[j]), the same bits.
inline void shrink2(float* v0, float* v1, const float* x0, const float* x1, const LoraMats& m,
                    int K) {
  if (K % kLanes != 0) {
    shrink(v0, x0, m, K), shrink(v1, x1, m, K);
    return;
  }
  int j = 0;
  for (; j + 4 <= m.rank; j += 4) {
    const float* a = m.a + static_cast<int64_t>(j) * K;
    vec s[2][4] = {};
    for (int d = 0; d < K; d += kLanes) {
      vec a0 = load(a + d), a1 = load(a + K + d), a2 = load(a + 2 * K + d),
          a3 = load(a + 3 * K + d);
      // Six loads for eight FMAs: GCC would otherwise fold each load into every FMA using it.
      vec xa = load(x0 + d), xb = load(x1 + d);
      in_register(a0), in_register(a1), in_register(a2), in_register(a3);
      in_register(xa), in_register(xb);
      s[0][0] = madd(xa, a0, s[0][0]), s[0][1] = madd(xa, a1, s[0][1]);
      s[0][2] = madd(xa, a2, s[0][2]), s[0][3] = madd(xa, a3, s[0][3]);
      s[1][0] = madd(xb, a0, s[1][0]), s[1][1] = madd(xb, a1, s[1][1]);
      s[1][2] = madd(xb, a2, s[1][2]), s[1][3] = madd(xb, a3, s[1][3]);
    }
    for (int i = 0; i < 4; i++)
      v0[j + i] = shrunk(m, lane_sum(s[0][i])), v1[j + i] = shrunk(m, lane_sum(s[1][i]));
  }
  for (; j < m.rank; j++) {
    v0[j] = shrunk(m, dot(x0, m.a + static_cast<int64_t>(j) * K, K));
    v1[j] = shrunk(m, dot(x1, m.a + static_cast<int64_t>(j) * K, K));
  }
}

// The shrink of the adapted rows rows[0..n) into p.v, two at a time where they share an adapter.
inline void shrink_rows(const LoraParams& p, const int32_t* rows, int n) {
  const int R = std::max(p.max_rank, 1);
  auto v = [&](int r) { return p.v + static_cast<int64_t>(r) * R; };
  auto x = [&](int r) { return p.x + static_cast<int64_t>(r) * p.K; };
  parallel_for((n + 1) / 2, [&](int i) {
    const int r = rows[2 * i];
    const LoraMats& m = p.tab[p.ad[r]];
    if (2 * i + 1 == n) return shrink(v(r), x(r), m, p.K);
    const int q = rows[2 * i + 1];
    if (p.ad[q] == p.ad[r]) return shrink2(v(r), v(q), x(r), x(q), m, p.K);
    shrink(v(r), x(r), m, p.K), shrink(v(q), x(q), p.tab[p.ad[q]], p.K);
  });
}

// The adapted rows: in batch order (gathered) or grouped by adapter (segmented, p.order, which
// the plan built: a stable sort by slot).
inline const std::vector<int32_t>& adapted_rows(const LoraParams& p, bool segmented) {
  thread_local std::vector<int32_t> rows;
  rows.clear();
  // The host kernels stream B transposed; a table the adapter registry did not build may lack
  // it. Checked for the slots this step reads, as they are found.
  auto use = [&](int32_t a) {
    if (!adapts(p, a)) return false;
    if (!p.tab[a].bt)
      fail("host LoRA: adapter slot ", a,
           " has no transposed B (LoraMats::bt), which the host "
           "kernels read; build the table with the adapter registry");
    return true;
  };
  if (segmented) {
    for (int s = 0; s < p.n_seg; s++)
      if (use(p.seg_ad[s]))
        rows.insert(rows.end(), p.order + p.seg_start[s], p.order + p.seg_start[s + 1]);
  } else {
    for (int r = 0; r < p.N; r++)
      if (use(p.ad[r])) rows.push_back(r);
  }
  return rows;
}

// The shrink of every adapted row, then the expand by (row, column block) into p.y.
inline void run(const LoraParams& p, const int32_t* rows, int n) {
  const int R = std::max(p.max_rank, 1);
  shrink_rows(p, rows, n);
  const int blocks = (p.Nout + kColumns - 1) / kColumns;
  // Column block outer, rows inner: the rows of one adapter that follow each other reuse the
  // block of Bt they have just read.
  parallel_for(blocks * n, [&](int t) {
    const int b = t / n, r = rows[t % n];
    const int n0 = b * kColumns, n1 = std::min(p.Nout, n0 + kColumns);
    expand(p.y + static_cast<int64_t>(r) * p.Nout + n0, p.v + static_cast<int64_t>(r) * R,
           p.tab[p.ad[r]], n0, n1);
  });
}

}  // namespace lora_detail

// Gathered (BGMV): the adapted rows in batch order, each with its own adapter.
inline void lora_gathered(const LoraParams& p) {
  const auto& rows = lora_detail::adapted_rows(p, false);
  lora_detail::run(p, rows.data(), static_cast<int>(rows.size()));
}

// Segmented (SGMV): the adapted rows grouped by adapter.
inline void lora_segmented(const LoraParams& p) {
  const auto& rows = lora_detail::adapted_rows(p, true);
  lora_detail::run(p, rows.data(), static_cast<int>(rows.size()));
}

// The expand as a linear's row addend: the deltas of the rows a call names, for columns n0..,
// into the tile's scratch, consecutive rows of one adapter together. p.v holds the rows' shrinks.
// Gathered names the rows in batch order; segmented has each task store its rows grouped by
// adapter (store_order), so that rows sharing an adapter share its loads of B^T (in decode with
// 8 adapters over 64 rows, row i on i % 8, batch order expanded one row per load).
struct LoraAdd {
  const LoraParams* p;
  bool segmented = false;
  // The task's rows m0 .. m0 + rows: those with an adapter as p.order has them (grouped by
  // adapter), then the others in batch order. An order that does not name each such row once
  // (the adapter registry's does) leaves the rows in batch order: the same values, stored later.
  bool store_order(int m0, int rows, int32_t* idx) const {
    if (!segmented || !p->order || p->n_seg <= 0) return false;
    thread_local std::vector<uint8_t> named;
    named.assign(rows, 0);
    int n = 0, with = 0;
    for (int r = m0; r < m0 + rows; r++) with += p->ad[r] >= 0;
    for (int i = 0; i < p->seg_start[p->n_seg]; i++)
      if (const int32_t r = p->order[i]; r >= m0 && r < m0 + rows) {
        if (p->ad[r] < 0 || named[r - m0]++) return false;
        idx[n++] = r;
      }
    if (n != with) return false;
    for (int r = m0; r < m0 + rows; r++)
      if (p->ad[r] < 0) idx[n++] = r;
    return true;
  }
  // Asks for the Bt lines of rows idx[0 .. n), columns n0 .. n0 + cols, into L2: rows() asks for
  // the next two calls' rows (a tile stores its rows in order), and the linear for a task's
  // first two (matmul.hpp, ask_rows_ahead). A row's lines there are one run of a few KB; met by
  // demand one row after another, the runs came at 14-18 GB/s, well under the read bandwidth
  // (bench_lora_linears); asked for one call ahead at ~22, one and two at ~24
  // (docs/PERFORMANCE.md). A row is so asked for twice, which measured faster than asking once,
  // two calls ahead (no faster than one call ahead); three calls ahead measured no better.
  // A row whose previous row has its adapter is not asked for: those lines were just read or
  // asked for (one adapter for a prompt's rows asked its whole panel again at every call, 256
  // prefetches per 2048 FMAs). From the linear (a task's first rows) the row before idx[0] is
  // nobody's: idx[0] is asked for; from rows() it is idx[-1], the call's last row.
  void ask_ahead(const int32_t* idx, int n, int n0, int cols) const {
    ask(idx, n, n0, cols, false);
  }
  void ask(const int32_t* idx, int n, int n0, int cols, bool first_known) const {
    const int b0 = n0 / kBtCols, b1 = (n0 + cols + kBtCols - 1) / kBtCols;
    for (int i = 0; i < n; i++) {
      const int32_t a = p->ad[idx[i]];
      if (!lora_detail::adapts(*p, a) || ((i > 0 || first_known) && p->ad[idx[i - 1]] == a))
        continue;
      const LoraMats& m = p->tab[a];
      // Blocks b0 .. b1 are one run; its lines from the one holding its first float to its end.
      // Integer arithmetic: that first line may start before the vector B^T lies in.
      const auto s = reinterpret_cast<std::uintptr_t>(lora_detail::bt_at(m, 0, b0 * kBtCols));
      const auto e = reinterpret_cast<std::uintptr_t>(lora_detail::bt_at(m, 0, b1 * kBtCols));
      for (std::uintptr_t c = s & ~std::uintptr_t{63}; c < e; c += 64)
        prefetch_kept<1>(reinterpret_cast<const void*>(c));
    }
  }
  void rows(const int32_t* idx, int n, int ahead, int n0, int cols, float* scratch,
            const float** out) const {
    const int R = std::max(p->max_rank, 1);
    ask(idx + n, std::min(2 * n, ahead), n0, cols, true);  // idx[n - 1]'s lines are read below
    for (int i = 0; i < n;) {
      const int32_t a = p->ad[idx[i]];
      if (!lora_detail::adapts(*p, a)) {
        out[i++] = nullptr;
        continue;
      }
      int k = 1;
      while (i + k < n && p->ad[idx[i + k]] == a) k++;
      float* y = scratch + static_cast<int64_t>(i) * cols;  // 0 + delta: a zeroed matrix's bits
      const float* v[kAddRows];
      for (int t = 0; t < k; t++) v[t] = p->v + static_cast<int64_t>(idx[i + t]) * R;
      const LoraMats& m = p->tab[a];
      switch (k) {
        case 1:
          lora_detail::expand_rows<1>(y, cols, v, m, n0, n0 + cols);
          break;
        case 2:
          lora_detail::expand_rows<2>(y, cols, v, m, n0, n0 + cols);
          break;
        case 3:
          lora_detail::expand_rows<3>(y, cols, v, m, n0, n0 + cols);
          break;
        default:
          lora_detail::expand_rows<4>(y, cols, v, m, n0, n0 + cols);
          break;
      }
      for (int t = 0; t < k; t++) out[i + t] = y + static_cast<int64_t>(t) * cols;
      i += k;
    }
  }
};
static_assert(kAddRows == 4, "LoraAdd::rows expands up to four rows at once");

// out = x W + b (+ each adapted row's delta) through epilogue E, the delta added where a
// separate delta matrix would have been: the same bits as lora_gathered into a zeroed matrix
// passed to linear as its addend. p.y is not used.
template <Epilogue E, class Mat>
void linear_lora(float* out, const float* x, const Mat& W, const float* b, int M,
                 const LoraParams& p, bool segmented) {
  const auto& rows = lora_detail::adapted_rows(p, segmented);
  lora_detail::shrink_rows(p, rows.data(), static_cast<int>(rows.size()));
  linear<E>(out, x, W, b, M, LoraAdd{&p, segmented});
}

}  // namespace servekit::kernels::host
