// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// Causal attention over the KV cache for many query rows (prefill), flash-attention style: a
// block takes a tile of BQ consecutive query rows and one head, streams the keys and values of
// their sequence through shared memory BK rows at a time, and keeps a running max / sum /
// weighted V per query (online softmax), so the (T x T) score matrix never exists.
//
// A tile may straddle two sequences of a packed batch (or hold pad and real rows of a
// left-padded one): the block then makes one pass per (cache slot, first row) in the tile, each
// pass streaming only those rows. Each query row r sees cache rows first[r]..row[r].
//
// The order of the sums is attention_state.hpp's, which the decode kernel follows too: keys in
// tiles of 32 from first[r], a split's state merged into the total every kSplitRows rows.
#include "servekit/kernels/attention_state.hpp"

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

template <class T, class Rows>
struct AttentionParams {
  float* out;            // (N, C)
  const float* qkv;      // (N, 3C): only q is read; k and v come from the cache
  KvDevice<T, Rows> kv;  // rows of (C) per (slot, row)
  const int32_t* slot;   // (N)
  const int32_t* first;  // (N) first cache row each query sees
  const int32_t* row;    // (N) its own cache row, the last it sees
  int N, C, n_head;
  float scale;  // 1 / sqrt(head_dim)
  // (N) which of the step's rows are the queries (their out, qkv, slot, first and row), in
  // order; null: rows 0..N-1. A step of decode and prefill rows gives each kernel its own.
  const int32_t* rows = nullptr;
};

// The step's row of the kernel's query i.
template <class P>
__device__ SERVEKIT_SIMT_INLINE int query_row(const P& p, int i) {
  return p.rows ? p.rows[i] : i;
}

namespace flash {
constexpr int BQ = 16, BK = attn::BK, kWarps = 4, kQPerWarp = BQ / kWarps;
constexpr int kThreads = kWarps * 32;
constexpr int kTilesPerSplit = attn::kSplitRows / BK;

template <int kHd>
struct SharedStorage {
  float q[BQ][kHd];      // scaled queries
  float k[BK][kHd + 1];  // +1: lane j reads row j, and rows then start in different banks
  float v[BK][kHd];
  float p[kWarps][BK];  // one warp's probabilities, read back by every lane
  int active[BQ];       // the query belongs to the current pass
  int done[BQ];
  int cur_slot, lo, hi;  // the pass: its slot and the cache rows it streams (lo: their first)
};
}  // namespace flash

template <class T, class Rows, int kHd>
__global__ void __launch_bounds__(flash::kThreads, 4)
    attention_prefill_kernel(const AttentionParams<T, Rows> p) {
  using namespace flash;
  constexpr int kDpl = (kHd + 31) / 32;  // features per lane
  SERVEKIT_SHARED(SharedStorage<kHd>, s);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = blockIdx.x * BQ, h = blockIdx.y;
  const int nq = imin(BQ, p.N - q0);
  const int C3 = 3 * p.C;
#pragma unroll 1
  for (int i = threadIdx.x; i < BQ * kHd; i += kThreads) {
    const int qi = i / kHd, d = i % kHd;
    s.q[qi][d] =
        qi < nq ? p.qkv[static_cast<int64_t>(query_row(p, q0 + qi)) * C3 + h * kHd + d] * p.scale
                : 0.f;
  }
  if (threadIdx.x < BQ) s.done[threadIdx.x] = static_cast<int>(threadIdx.x) >= nq;
  for (;;) {
    __syncthreads();
    if (threadIdx.x == 0) {
      int cur = -1, lo = 0, hi = -1;
#pragma unroll 1
      for (int i = 0; i < BQ; ++i) {
        s.active[i] = 0;
        if (s.done[i]) continue;
        const int r = query_row(p, q0 + i);
        if (cur < 0) cur = p.slot[r], lo = p.first[r], hi = p.row[r];
        // Tiles count from the query's own first row, so a pass holds one first row.
        if (p.slot[r] != cur || p.first[r] != lo) continue;
        s.active[i] = 1, s.done[i] = 1;
        hi = imax(hi, p.row[r]);
      }
      s.cur_slot = cur, s.lo = lo, s.hi = hi;
    }
    __syncthreads();
    const int cur = s.cur_slot, lo = s.lo, hi = s.hi;
    if (cur < 0) break;

    // Per query: the state of the split being walked, and the total of the splits before it.
    attn::State<kDpl> split[kQPerWarp], total[kQPerWarp];
#pragma unroll
    for (int a = 0; a < kQPerWarp; ++a)
      split[a] = attn::empty_state<kDpl>(), total[a] = attn::empty_state<kDpl>();
    for (int t0 = lo, tile = 0; t0 <= hi; t0 += BK, ++tile) {
#pragma unroll 1
      for (int i = threadIdx.x; i < BK * kHd; i += kThreads) {
        const int j = i / kHd, d = i % kHd, t = t0 + j;
        float kv_k = 0.f, kv_v = 0.f;
        if (t <= hi) {
          const int64_t o = p.kv.rows(cur, t) + h * kHd + d;
          kv_k = p.kv.key(o), kv_v = p.kv.value(o);
        }
        s.k[j][d] = kv_k, s.v[j][d] = kv_v;
      }
      __syncthreads();
      const bool split_ends = (tile + 1) % kTilesPerSplit == 0 || t0 + BK > hi;
#pragma unroll
      for (int a = 0; a < kQPerWarp; ++a) {
        const int qi = warp * kQPerWarp + a;
        const int t = t0 + lane;
        // Inactive queries (another pass's) and keys past the query's row score -inf.
        float sc = -INFINITY;
        if (s.active[qi] && t <= p.row[query_row(p, q0 + qi)]) {
          sc = 0.f;
#pragma unroll
          for (int d = 0; d < kHd; ++d) sc = fmaf(s.q[qi][d], s.k[lane][d], sc);
        }
        attn::tile_step<kHd>(split[a], sc, s.p[warp], lane,
                             [&](int j, int d) { return s.v[j][d]; });
        if (split_ends) {
          attn::merge(total[a], split[a]);
          split[a] = attn::empty_state<kDpl>();
        }
      }
      __syncthreads();
    }
#pragma unroll
    for (int a = 0; a < kQPerWarp; ++a) {
      const int qi = warp * kQPerWarp + a;
      if (!s.active[qi]) continue;
      float* o = p.out + static_cast<int64_t>(query_row(p, q0 + qi)) * p.C + h * kHd;
#pragma unroll
      for (int c = 0; c < kDpl; ++c) {
        const int d = lane + 32 * c;
        if (d < kHd) o[d] = total[a].acc[c] / total[a].l;
      }
    }
  }
}

// Bytes of K and V the kernels read for p's queries, walking the row arrays as the kernels do:
// the decode kernel each query's rows once; the prefill kernel, per tile of BQ queries, each
// pass's rows (a pass: the tile's queries of one slot and first row). The arrays are read on
// the host, so this is known under the emulator (device memory is host memory), but not while
// capturing (the step's arrays are not uploaded yet) nor under nvcc: 0 there. Walked only
// while a LaunchLog keeps the launches, to keep it off the step's path otherwise.
template <class T, class Rows>
std::size_t attention_kv_bytes(const AttentionParams<T, Rows>& p, bool prefill) {
#if defined(SERVEKIT_SIMT_HOST)
  if (!simt::logging_launches() || simt::capturing_on_host()) return 0;
  std::size_t rows = 0;
  const int tile = prefill ? flash::BQ : 1;
  for (int q0 = 0; q0 < p.N; q0 += tile) {
    const int nq = imin(tile, p.N - q0);
    int done = 0;
    unsigned taken = 0;  // a bit per query of the tile (BQ <= 32)
    while (done < nq) {
      int slot = -1, lo = 0, hi = -1;
      for (int i = 0; i < nq; i++) {
        if (taken >> i & 1u) continue;
        const int r = p.rows ? p.rows[q0 + i] : q0 + i;
        if (slot < 0) slot = p.slot[r], lo = p.first[r];
        if (p.slot[r] != slot || p.first[r] != lo) continue;
        taken |= 1u << i, done++;
        hi = imax(hi, p.row[r]);
      }
      rows += static_cast<std::size_t>(hi - lo + 1);
    }
  }
  return rows * 2 * p.C * sizeof(T);
#else
  (void)p, (void)prefill;
  return 0;
#endif
}
// The rest of an attention launch's bytes: each query's indices and q read, its output written.
template <class T, class Rows>
std::size_t attention_io_bytes(const AttentionParams<T, Rows>& p) {
  return static_cast<std::size_t>(p.N) *
         (3 * sizeof(int32_t) + (p.rows ? sizeof(int32_t) : 0) + 2 * p.C * sizeof(float));
}

template <class T, class Rows>
void attention_prefill(const AttentionParams<T, Rows>& p, simt::stream_handle stream = nullptr) {
  constexpr const char* who = "kernels::attention_prefill";
  const int hd = check_heads(who, p.C, p.n_head);
  if (p.N < 1) fail(who, ": cannot run N = ", p.N, " query rows");
  if (p.n_head > 65535) fail(who, ": n_head = ", p.n_head, " exceeds the grid's y limit 65535");
  static_assert(flash::BQ <= 32, "attention_kv_bytes keeps a tile's queries in 32 bits");
  dispatch_head_dim(hd, who, p.C, p.n_head, [&]<int kHd>() {
    simt::expect_bytes(attention_io_bytes(p) + attention_kv_bytes(p, true));
    simt::launch(simt::kernel<attention_prefill_kernel<T, Rows, kHd>>,
                 dim3(ceil_div(p.N, flash::BQ), p.n_head), dim3(flash::kThreads), 0, stream, p);
  });
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
