// SPDX-License-Identifier: Apache-2.0
#pragma once
// out = epilogue(x @ W + b) on the host, for W (K, N) stored in any weight format: the fast
// CPU path (kernels/ref/ holds the naive oracle it is tested against).
//
// Two shapes:
//   - one row (decode at batch 1) is bound by reading W: each thread owns a band of output
//     columns and streams W's rows through it, widening each weight as it is loaded;
//   - more rows (batched decode, prefill) run a register-tiled micro-kernel: a kMR x kNR tile
//     of the output stays in registers while K streams through, so each weight loaded feeds
//     kMR FMAs. W packed at load in strips of kNR columns (host/packed.hpp) is read in place,
//     each strip widened in the tile's loads (a vcvtph2ps or vpmovzxbd per vector) while every
//     row tile reuses it from L1; W in (K, N) order is first widened into an fp32 block.
//
// Every output is one fp32 chain over k = 0 .. K-1 (per group for zero-point codes) in either
// shape, whatever the rows, blocks or threads: a row's result does not depend on what else
// shares the call (the engine's batch invariance; tests/test_host_matmul.cpp checks it bitwise).
#include <algorithm>
#include <concepts>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "servekit/core/thread_pool.hpp"
#include "servekit/kernels/epilogue.hpp"
#include "servekit/kernels/host/simd.hpp"
#include "servekit/kernels/host/vmath.hpp"

namespace servekit::kernels::host {

using kernels::Epilogue;

// W as the kernels stream it: (K, N) elements of T. Zero-point codes (T = uint8_t) carry a
// (scale, min) per group of group_rows input rows and per column (state_cols = N) or per
// tensor (state_cols = 1); the sums over a group factor as
//   sum_k x_k (q_kn scale + min) = scale * sum_k x_k q_kn + min * sum_k x_k,
// so the k-loop multiplies by the raw code and the floats are applied once per group.
template <class T>
struct WeightView {
  const T* w = nullptr;
  int K = 0, N = 0;
  int group_rows = 0;  // K where there is no group structure
  const float* scale = nullptr;
  const float* zero = nullptr;
  int state_cols = 0;
  bool packed = false;  // w in strips of kNR columns (host/packed.hpp), else (K, N)
  static constexpr bool grouped = std::is_same_v<T, uint8_t>;
};

// add: an addend applied before the epilogue (a LoRA delta), or nullptr.
// One loop per case: GCC turns a test of add inside the loop into masked loads through the
// stack (the matmul 12-15% slower at 128 rows).
template <Epilogue E>
inline void store_row(float* o, const float* acc, const float* b, const float* add, int cols) {
  if constexpr (E == Epilogue::Gelu) {
    // In registers, so that the row goes out to memory once: storing the sums and then
    // rewriting them in place was two passes over a row that is no longer in L1 (in a W8A8
    // prefill profile the two stores held half the GELU linear's own samples). Each value is
    // the loops' below, (acc + b) + add, then gelu_row's per lane (a zero bias adds +0.f).
    int c = 0;
    if (add && b)
      for (; c + kLanes <= cols; c += kLanes)
        store(o + c, gelu_tanh(load(acc + c) + load(b + c) + load(add + c)));
    else if (add)
      for (; c + kLanes <= cols; c += kLanes)
        store(o + c, gelu_tanh(load(acc + c) + 0.f + load(add + c)));
    else if (b)
      for (; c + kLanes <= cols; c += kLanes) store(o + c, gelu_tanh(load(acc + c) + load(b + c)));
    else
      for (; c + kLanes <= cols; c += kLanes) store(o + c, gelu_tanh(load(acc + c) + 0.f));
    if (c < cols) {
      vec v{};
      for (int j = 0; c + j < cols; j++)
        v[j] = add ? acc[c + j] + (b ? b[c + j] : 0.f) + add[c + j]
                   : acc[c + j] + (b ? b[c + j] : 0.f);
      v = gelu_tanh(v);
      for (int j = 0; c + j < cols; j++) o[c + j] = v[j];
    }
    return;
  }
  auto put = [&](int c, float v) {
    if constexpr (E == Epilogue::Residual)
      o[c] += v;
    else
      o[c] = v;
  };
  if (add)
    for (int c = 0; c < cols; c++) put(c, acc[c] + (b ? b[c] : 0.f) + add[c]);
  else
    for (int c = 0; c < cols; c++) put(c, acc[c] + (b ? b[c] : 0.f));
}

// What a matmul adds to its rows before the epilogue, kAddRows rows at a time:
// rows(idx, n, ahead, n0, cols, scratch, out) sets out[i] (i < n <= kAddRows) to row idx[i]'s
// values for columns n0 .. n0 + cols, or nullptr for nothing; idx[n .. n + ahead) are the rows
// the next calls will name (an addend may ask for their lines); scratch holds kAddRows x cols
// floats the addend may fill. A dense (M, N) matrix (a LoRA delta computed beforehand) is one;
// the fused LoRA expand of host/lora.hpp, which makes the rows' deltas as the tile stores them,
// is another (rows of one adapter share its loads of B, hence several rows at a call).
inline constexpr int kAddRows = 4;
template <class A>
concept RowAddend = requires(const A& a, const int32_t* idx, float* s, const float** out) {
  a.rows(idx, 1, 0, 0, 0, s, out);
};

// An addend that reads memory of its own may also ask for a call's lines ahead of it:
// ask_ahead(idx, n, n0, cols), a prefetch of what rows(idx, n, ...) will read.
template <class A>
inline void ask_rows_ahead(const A& a, const int32_t* idx, int n, int n0, int cols) {
  if constexpr (requires { a.ask_ahead(idx, n, n0, cols); }) a.ask_ahead(idx, n, n0, cols);
}

// The order a task stores its rows m0 .. m0 + rows in: the addend's, where it has one
// (store_order(m0, rows, idx) filling idx and returning true: the segmented LoRA expand groups
// rows by adapter, so that one load of B serves several), else m0, m0 + 1, ... A row's values
// do not depend on when it is stored. Per thread, valid until the thread's next call.
template <class A>
const int32_t* store_order(const A& a, int m0, int rows) {
  thread_local std::vector<int32_t> idx;
  idx.resize(rows);
  if constexpr (requires { a.store_order(m0, rows, idx.data()); })
    if (a.store_order(m0, rows, idx.data())) return idx.data();
  for (int i = 0; i < rows; i++) idx[i] = m0 + i;
  return idx.data();
}

struct DenseAdd {
  const float* p = nullptr;  // (M, N) or nullptr
  int N = 0;
  void rows(const int32_t* idx, int n, int /*ahead*/, int n0, int /*cols*/, float* /*scratch*/,
            const float** out) const {
    for (int i = 0; i < n; i++) out[i] = p ? p + static_cast<int64_t>(idx[i]) * N + n0 : nullptr;
  }
};

// Per-thread scratch that outlives a call: a decode step runs ~50 linears, whose partial sums
// should not be heap-allocated each time. Tag keeps the users of one thread apart (a caller's
// buffer stays live while its parallel region uses the workers' ones).
template <int Tag>
float* thread_scratch(std::size_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

// a[c] += sc * p[c] + zp * xs: one group's sums into the output. One function for both shapes,
// so that both round the same expression the same way.
inline void add_group(float* a, const float* p, const float* sc, const float* zp, float xs,
                      int cols, bool per_column) {
  if (per_column) {
    for (int c = 0; c < cols; c++) a[c] += sc[c] * p[c] + zp[c] * xs;
  } else {
    for (int c = 0; c < cols; c++) a[c] += sc[0] * p[c] + zp[0] * xs;
  }
}

// xs (M, K / group_rows): each row's sum of x over each group, k in order.
template <class T>
const float* group_sums(const float* x, const WeightView<T>& W, int M) {
  if constexpr (!WeightView<T>::grouped) {
    return nullptr;
  } else {
    const int G = W.K / W.group_rows;
    float* xs = thread_scratch<3>(static_cast<std::size_t>(M) * G);
    for (int r = 0; r < M; r++)
      for (int g = 0; g < G; g++) {
        float s = 0.f;
        const float* xr = x + static_cast<int64_t>(r) * W.K + g * W.group_rows;
        for (int k = 0; k < W.group_rows; k++) s += xr[k];
        xs[r * G + g] = s;
      }
    return xs;
  }
}

// How many rows of W ahead the micro-kernel asks for its strip, into L2 (prefetcht2: the line
// is used once). In W's (K, N) order a strip is one or two cache lines per row, rows N elements
// apart, which the hardware prefetchers do not follow; packed (host/packed.hpp) the strip is one
// stream and this only covers its start.
constexpr int kAhead = 96;

// Asks for the line at byte offset off of p. Integer arithmetic: the row ahead may lie past the
// end of W, which a prefetch may touch but a pointer may not point to.
inline void prefetch_l2(const void* p, int64_t off) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(p) + off), 0,
                     1);
}

// A loop with a constant trip count, unrolled before the optimiser decides where its arrays
// live (see tile). nvcc's front end, which also reads this header in a .cu, has no such pragma.
#if defined(__CUDACC__)
#define SERVEKIT_UNROLL_FULLY
#else
#define SERVEKIT_UNROLL_FULLY _Pragma("GCC unroll 16")
#endif

// The micro-kernel: acc (MR, kNR) at ld += x (MR, kn) at ldx @ w (kn, kNR) at ldw, w widened
// from T as it is loaded.
template <int MR, class T>
inline void tile(float* acc, int ld, const float* x, int ldx, const T* w, int64_t ldw, int kn) {
  constexpr int NV = kNR / kLanes;
  // The accumulators must live in registers for the whole k loop. Unless the loops that fill
  // and store t are unrolled first, g++ 12 at -O3 with 16 ymm registers keeps t in memory too
  // and stores every accumulator on every k (tiles of 3 to 6 rows): half the AVX2 tile's rate.
  // scripts/check_host_tiles.sh looks for stack references in the k loop of every tile.
  vec t[MR][NV];
  SERVEKIT_UNROLL_FULLY
  for (int r = 0; r < MR; r++) {
    SERVEKIT_UNROLL_FULLY
    for (int v = 0; v < NV; v++) t[r][v] = load(acc + r * ld + v * kLanes);
  }
  for (int k = 0; k < kn; k++) {
    vec wv[NV];
    for (int b = 0; b < int(NV * kLanes * sizeof(T)); b += 64)
      prefetch_l2(w, static_cast<int64_t>((k + kAhead) * ldw * sizeof(T)) + b);
    for (int v = 0; v < NV; v++) wv[v] = load(w + k * ldw + v * kLanes);
    for (int r = 0; r < MR; r++) {
      const vec xb = broadcast(x + static_cast<int64_t>(r) * ldx + k);
      for (int v = 0; v < NV; v++) t[r][v] = madd(xb, wv[v], t[r][v]);
    }
  }
  SERVEKIT_UNROLL_FULLY
  for (int r = 0; r < MR; r++) {
    SERVEKIT_UNROLL_FULLY
    for (int v = 0; v < NV; v++) store(acc + r * ld + v * kLanes, t[r][v]);
  }
}

// tile<MR> over S adjacent packed strips at once (strip s at w + s * strip_stride), for the
// one- and two-row tiles of decode: over one strip a one-row tile has only kNR / kLanes
// accumulator chains, so each FMA waits on the one before it (4 cycles) and a uint8 weight's
// widening cannot overlap it; S strips give S times the chains. Each column is still one chain
// over k in order: the bits of tile<MR>.
template <int MR, int S, class T>
inline void tile_strips(float* acc, int ld, const float* x, int ldx, const T* w,
                        int64_t strip_stride, int kn) {
  constexpr int NV = kNR / kLanes;
  vec t[MR][S][NV];
  SERVEKIT_UNROLL_FULLY
  for (int r = 0; r < MR; r++) {
    SERVEKIT_UNROLL_FULLY
    for (int s = 0; s < S; s++) {
      SERVEKIT_UNROLL_FULLY
      for (int v = 0; v < NV; v++) t[r][s][v] = load(acc + r * ld + s * kNR + v * kLanes);
    }
  }
  for (int k = 0; k < kn; k++) {
    SERVEKIT_UNROLL_FULLY
    for (int s = 0; s < S; s++) {
      const T* ws = w + s * strip_stride;
      for (int b = 0; b < int(kNR * sizeof(T)); b += 64)
        prefetch_l2(ws, static_cast<int64_t>((k + kAhead) * kNR * sizeof(T)) + b);
      vec wv[NV];
      for (int v = 0; v < NV; v++) wv[v] = load(ws + k * kNR + v * kLanes);
      for (int r = 0; r < MR; r++) {
        const vec xb = broadcast(x + static_cast<int64_t>(r) * ldx + k);
        for (int v = 0; v < NV; v++) t[r][s][v] = madd(xb, wv[v], t[r][s][v]);
      }
    }
  }
  SERVEKIT_UNROLL_FULLY
  for (int r = 0; r < MR; r++) {
    SERVEKIT_UNROLL_FULLY
    for (int s = 0; s < S; s++) {
      SERVEKIT_UNROLL_FULLY
      for (int v = 0; v < NV; v++) store(acc + r * ld + s * kNR + v * kLanes, t[r][s][v]);
    }
  }
}

// The same sums for a tile narrower than kNR (the last columns when N % kNR != 0). k outside:
// a k-inner loop would be a reduction, which GCC may vectorise as products then in-order adds,
// rounding differently from the fused chain of the other shapes.
template <class T>
inline void tile_edge(float* acc, int ld, const float* x, int ldx, const T* w, int64_t ldw, int kn,
                      int rows, int cols) {
  for (int k = 0; k < kn; k++)
    for (int r = 0; r < rows; r++) {
      const float xv = x[static_cast<int64_t>(r) * ldx + k];
      for (int c = 0; c < cols; c++)
        acc[r * ld + c] = madd(xv, widen(w[k * ldw + c]), acc[r * ld + c]);
    }
}

// fn.template operator()<R>() for R = rows, 1 <= rows <= MaxRows: a tile kernel whose row count
// is known only at run time still runs its compiled-for-R form.
template <int MaxRows, class Fn>
inline void with_rows(int rows, Fn&& fn) {
  [&]<int... R>(std::integer_sequence<int, R...>) {
    (void)((rows == R + 1 && (fn.template operator()<R + 1>(), true)) || ...);
  }
  (std::make_integer_sequence<int, MaxRows>{});
}

// tile<rows> for rows in 1 .. kMR: a short last row tile still runs a full-speed kernel.
template <class T>
inline void tile_rows(int rows, float* acc, int ld, const float* x, int ldx, const T* w,
                      int64_t ldw, int kn) {
  with_rows<kMR>(rows, [&]<int R>() { tile<R, T>(acc, ld, x, ldx, w, ldw, kn); });
}

// Strips packed kn x kNR each, strip_stride apart, n_strips of them, for `rows` rows of x: the
// one- and two-row tiles take kStrips / rows strips at a time (tile_strips), the rest one.
constexpr int kStrips = 4;
template <class T>
inline void tile_packed(int rows, float* acc, int ld, const float* x, int ldx, const T* w,
                        int64_t strip_stride, int n_strips, int kn) {
  int s = 0;
  if (rows == 1)
    for (; s + kStrips <= n_strips; s += kStrips)
      tile_strips<1, kStrips>(acc + s * kNR, ld, x, ldx, w + s * strip_stride, strip_stride, kn);
  if (rows == 2)
    for (; s + kStrips / 2 <= n_strips; s += kStrips / 2)
      tile_strips<2, kStrips / 2>(acc + s * kNR, ld, x, ldx, w + s * strip_stride, strip_stride,
                                  kn);
  for (; s < n_strips; s++)
    tile_rows(rows, acc + s * kNR, ld, x, ldx, w + s * strip_stride, kNR, kn);
}

// One row: bandwidth-bound on W. Each thread owns a band of output columns [n0, n1) and streams
// W's rows through it in order; runs of >= 64 columns keep the prefetcher streaming. Band edges
// on kBandFloats-float (64 B) lines, so two threads never share a cache line of out.
inline constexpr int kBandFloats = 16;
template <Epilogue E, class T, RowAddend A>
void gemv(float* out, const float* x, const WeightView<T>& W, const float* b, const A& add) {
  const int K = W.K, N = W.N;
  const float* xs = group_sums(x, W, 1);
  constexpr int kMinCols = 64;
  const int n_bands = std::max(1, std::min(host_threads(), N / kMinCols));
  parallel_for(
      n_bands,
      [&](int i) {
        auto edge = [&](int j) {
          return j == n_bands
                     ? N
                     : static_cast<int>(static_cast<int64_t>(N) * j / n_bands) & ~(kBandFloats - 1);
        };
        const int n0 = edge(i), n1 = edge(i + 1), cols = n1 - n0;
        if (cols <= 0) return;
        float* acc = thread_scratch<0>(2 * static_cast<std::size_t>(cols) + kLanes);
        float* part = acc + cols;  // one group's sums (zero-point codes)
        std::fill(acc, acc + cols, 0.f);
        for (int k0 = 0; k0 < K; k0 += W.group_rows) {
          float* p = WeightView<T>::grouped ? part : acc;
          if (WeightView<T>::grouped) std::fill(part, part + cols, 0.f);
          // Four rows of W per pass over the band: its sums are loaded and stored once per
          // four FMAs, still added in k order.
          const int k1 = k0 + W.group_rows;
          int k = k0;
          for (; k + 4 <= k1; k += 4) {
            const T* w = W.w + static_cast<int64_t>(k) * N + n0;
            const float x0 = x[k], x1 = x[k + 1], x2 = x[k + 2], x3 = x[k + 3];
            const vec b0 = broadcast(x + k), b1 = broadcast(x + k + 1), b2 = broadcast(x + k + 2),
                      b3 = broadcast(x + k + 3);
            int c = 0;
            for (; c + kLanes <= cols; c += kLanes) {
              vec t = madd(b0, load(w + c), load(p + c));
              t = madd(b1, load(w + N + c), t);
              t = madd(b2, load(w + 2 * N + c), t);
              store(p + c, madd(b3, load(w + 3 * N + c), t));
            }
            for (; c < cols; c++) {
              float t = madd(x0, widen(w[c]), p[c]);
              t = madd(x1, widen(w[N + c]), t);
              t = madd(x2, widen(w[2 * N + c]), t);
              p[c] = madd(x3, widen(w[3 * N + c]), t);
            }
          }
          for (; k < k1; k++) {
            const T* w = W.w + static_cast<int64_t>(k) * N + n0;
            const float xv = x[k];
            const vec xb = broadcast(x + k);
            int c = 0;
            for (; c + kLanes <= cols; c += kLanes)
              store(p + c, madd(xb, load(w + c), load(p + c)));
            for (; c < cols; c++) p[c] = madd(xv, widen(w[c]), p[c]);
          }
          if constexpr (WeightView<T>::grouped) {
            const int64_t s0 = static_cast<int64_t>(k0 / W.group_rows) * W.state_cols;
            const bool pc = W.state_cols > 1;
            add_group(acc, part, W.scale + s0 + (pc ? n0 : 0), W.zero + s0 + (pc ? n0 : 0),
                      xs[k0 / W.group_rows], cols, pc);
          }
        }
        const float* extra = nullptr;
        const int32_t row0 = 0;
        add.rows(&row0, 1, 0, n0, cols, thread_scratch<2>(cols), &extra);
        store_row<E>(out + n0, acc, b ? b + n0 : nullptr, extra, cols);
      },
      1);
}

// The column panels of a gemm's tasks, (m_blocks row blocks) x (n panels of NB columns, whole
// strips of `strip`): panels as wide as max_nb, but at least two per thread when the rows give
// few tasks (a 768-wide layer in 3 panels would leave one of 2 threads idle a third of the
// time), and where the tasks are still few, a whole number of them per thread if a split into
// equal panels gives one (a 2304-wide qkv in 9 panels of 256 left one of 2 threads idle a
// ninth of the linear; in 12 of 192 neither is).
struct Panels {
  int n, NB;
};
inline Panels panels(int N, int m_blocks, int max_nb, int strip) {
  const int T = host_threads();
  int n = (N + max_nb - 1) / max_nb;
  if (m_blocks * n < 2 * T) n = std::max(n, (2 * T + m_blocks - 1) / m_blocks);
  const int NB = std::min(max_nb, ((N + n - 1) / n + strip - 1) / strip * strip);
  n = (N + NB - 1) / NB;
  const int strips = (N + strip - 1) / strip;
  if (m_blocks * n < 8 * T && (m_blocks * n) % T != 0)
    for (int e = n + 1; e <= std::min(strips, 2 * n); e++)
      if (strips % e == 0 && (m_blocks * e) % T == 0) return {e, strips / e * strip};
  return {n, NB};
}

// Many rows: tasks of (up to MB rows) x (NB columns), each walking K in (kb, NB) blocks of W.
template <Epilogue E, class T, RowAddend A>
void gemm(float* out, const float* x, const WeightView<T>& W, const float* b, int M, const A& add) {
  // 128 x 256 outputs per task at most (measured against 64 rows: prefill +10% on AVX-512,
  // level on AVX2; docs/host_kernels.md). Packed W is walked over all of K (a group) at once, so
  // that a strip is one contiguous run of K x kNR weights, which the prefetchers follow, and a row
  // tile loads and stores its accumulators once: in blocks of 256 rows the strip came as 16 KB
  // runs 48 KB apart, and decode steps were 10-30% slower at batch 8 and up to 1.5x at batch 1
  // with AVX-512 (docs/host_kernels.md). W in (K, N) order goes in blocks of KB rows, widened
  // into a (KB, NB) buffer.
  constexpr int kMaxNB = 256, KB = 256, MB = 128;
  const int kb = W.packed ? W.K : KB;
  constexpr bool grouped = WeightView<T>::grouped;
  const int K = W.K, N = W.N, GK = W.group_rows;
  const float* xs = group_sums(x, W, M);
  const int m_blocks = (M + MB - 1) / MB;
  const Panels pn = panels(N, m_blocks, kMaxNB, kNR);
  const int n_panels = pn.n, NB = pn.NB;
  parallel_for(
      m_blocks * n_panels,
      [&](int task) {
        const int m0 = task / n_panels * MB, rows = std::min(MB, M - m0);
        const int n0 = task % n_panels * NB, cols = std::min(NB, N - n0);
        float* acc = thread_scratch<0>(static_cast<std::size_t>(2 * MB) * kMaxNB);  // (rows, NB)
        float* part = acc + MB * kMaxNB;  // (rows, NB): one group's sums (zero-point codes)
        float* wbuf = thread_scratch<1>(static_cast<std::size_t>(KB) * kMaxNB);  // (KB, NB)
        std::fill(acc, acc + static_cast<std::size_t>(rows) * NB, 0.f);
        const float* xb = x + static_cast<int64_t>(m0) * K;
        const int32_t* order = store_order(add, m0, rows);
        for (int g0 = 0; g0 < K; g0 += GK) {
          float* p = grouped ? part : acc;
          if (grouped) std::fill(part, part + static_cast<std::size_t>(rows) * NB, 0.f);
          for (int k0 = g0; k0 < g0 + GK; k0 += kb) {
            const int kn = std::min(kb, g0 + GK - k0);
            // Rows k0.. of the strip starting at panel column c (a multiple of kNR); its rows
            // are N elements apart in W's (K, N) order, kNR packed (host/packed.hpp).
            auto strip = [&](int c) {
              return W.packed ? W.w + (static_cast<int64_t>((n0 + c) / kNR) * K + k0) * kNR
                              : W.w + static_cast<int64_t>(k0) * N + n0 + c;
            };
            // Row tiles of even height (8 rows on a 6-row tile: 4 + 4, not 6 + 2).
            const int n_tiles = (rows + kMR - 1) / kMR, th = (rows + n_tiles - 1) / n_tiles;
            if (W.packed) {
              // Packed W is read in place, widened in the tiles' loads. One row tile (decode)
              // walks several strips at once; more walk strip by strip, every row tile reading
              // the strip while it sits in L1. A copy into a widened block would be a write and
              // a read of every weight: the AVX2 batch-8 step spent 34% of its time making it,
              // and in place is 1.3-1.5x faster at batch 8 and 1.15x at 32 (docs/host_kernels.md).
              // A strip's padding lanes are summed like the others and never stored.
              if (n_tiles == 1) {
                tile_packed(rows, p, NB, xb + k0, K, strip(0), static_cast<int64_t>(K) * kNR,
                            (cols + kNR - 1) / kNR, kn);
                continue;
              }
              for (int c0 = 0; c0 < cols; c0 += kNR) {
                // The addend's first two calls asked for while the last strip is summed: later
                // calls ask for their own successors (host/lora.hpp), these would come unasked.
                if (c0 + kNR >= cols && k0 + kn == K)
                  ask_rows_ahead(add, order, std::min(2 * kAddRows, rows), n0, cols);
                for (int r0 = 0; r0 < rows; r0 += th)
                  tile_rows(std::min(th, rows - r0), p + r0 * NB + c0, NB,
                            xb + static_cast<int64_t>(r0) * K + k0, K, strip(c0), kNR, kn);
              }
              continue;
            }
            // W in (K, N) order: a tile's kNR-wide strip is one or two cache lines per row, N
            // elements apart, which the prefetchers do not follow. One row tile reads it anyway
            // (each weight feeds that tile only, and a copy would be a second pass over the
            // bytes that bound the step); more first widen the block into wbuf, read in runs of
            // NB elements per row, and reuse it from L2.
            auto tiles = [&](int r0, int mr, const auto* w, int64_t ld) {
              const float* xr = xb + static_cast<int64_t>(r0) * K + k0;
              for (int c0 = 0; c0 < cols; c0 += kNR) {
                float* a = p + r0 * NB + c0;
                if (cols - c0 >= kNR)
                  tile_rows(mr, a, NB, xr, K, w + c0, ld, kn);
                else
                  tile_edge(a, NB, xr, K, w + c0, ld, kn, mr, cols - c0);
              }
            };
            if (n_tiles == 1) {
              tiles(0, rows, strip(0), N);
              continue;
            }
            for (int k = 0; k < kn; k++)
              widen_row(wbuf + k * NB, strip(0) + static_cast<int64_t>(k) * N, cols);
            for (int r0 = 0; r0 < rows; r0 += th) tiles(r0, std::min(th, rows - r0), wbuf, NB);
          }
          if constexpr (grouped) {
            const int g = g0 / GK, G = K / GK;
            const int64_t s0 = static_cast<int64_t>(g) * W.state_cols;
            const bool pc = W.state_cols > 1;
            for (int r = 0; r < rows; r++)
              add_group(acc + r * NB, part + r * NB, W.scale + s0 + (pc ? n0 : 0),
                        W.zero + s0 + (pc ? n0 : 0), xs[(m0 + r) * G + g], cols, pc);
          }
        }
        float* scratch = thread_scratch<2>(kAddRows * kMaxNB);
        for (int i = 0; i < rows; i += kAddRows) {
          const int n = std::min(kAddRows, rows - i);
          const float* extra[kAddRows];
          add.rows(order + i, n, std::min(2 * kAddRows, rows - i - n), n0, cols, scratch, extra);
          for (int t = 0; t < n; t++) {
            const int r = order[i + t];
            store_row<E>(out + static_cast<int64_t>(r) * N + n0, acc + (r - m0) * NB,
                         b ? b + n0 : nullptr, extra[t], cols);
          }
        }
      },
      1);
}

template <Epilogue E, class T>
void matmul(float* out,              // (M, N)
            const float* x,          // (M, K)
            const WeightView<T>& W,  // (K, N)
            const float* b,          // (N) or nullptr
            int M,
            const RowAddend auto& add) {  // added to the rows before the epilogue
  if (M == 1 && !W.packed)
    gemv<E>(out, x, W, b, add);
  else
    gemm<E>(out, x, W, b, M, add);
}

template <Epilogue E, class T>
void matmul(float* out, const float* x, const WeightView<T>& W, const float* b, int M,
            const float* add = nullptr) {  // (M, N) added before the epilogue, or nullptr
  matmul<E>(out, x, W, b, M, DenseAdd{add, W.N});
}

}  // namespace servekit::kernels::host
