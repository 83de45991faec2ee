// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// Attention for few query rows (decode: one row per sequence) over long caches, flash-decoding
// style: a query's cache rows are cut into splits of kSplitRows (attention_state.hpp), and each
// warp walks one split, so a single long sequence still spreads over many warps and blocks. A
// block takes one (query row, head) and kWarps consecutive splits. When a query has at most
// kWarps splits, its block merges them and writes the output; otherwise every warp writes its
// split's state to a workspace and attention_combine merges them, in split order either way.
// The prefill kernel sums in the same order, so either kernel gives a row the same bits.
#include "servekit/kernels/attention_prefill.hpp"  // AttentionParams, attention_state.hpp

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

namespace flash_decode {
constexpr int kWarps = 4, kThreads = kWarps * 32, BK = attn::BK;

template <int kHd>
struct SharedStorage {
  float q[kHd];
  float p[kWarps][BK];
  int64_t row[kWarps][BK];  // each warp's tile: where key / value j's head starts
  float m[kWarps], l[kWarps];
  float acc[kWarps][kHd];
};
}  // namespace flash_decode

// The splits' states, (N, n_head, splits) by query (not by the step's row): max, sum and
// unnormalised output.
struct SplitWorkspace {
  float* m;    // (N, n_head, splits)
  float* l;    // (N, n_head, splits)
  float* acc;  // (N, n_head, splits, head_dim)
  int splits;
};

// Splits of the longest row; up to kWarps of them need no workspace.
inline int decode_splits(int max_rows) {
  return attn::splits_for(max_rows);
}
// Floats of workspace for N rows: m, l, acc back to back.
inline std::size_t decode_workspace_floats(int N, int C, int n_head, int splits) {
  return splits <= flash_decode::kWarps ? 0
                                        : static_cast<std::size_t>(N) * n_head * splits * 2 +
                                              static_cast<std::size_t>(N) * C * splits;
}

template <class T, class Rows, int kHd>
__global__ void __launch_bounds__(flash_decode::kThreads)
    attention_decode_kernel(const AttentionParams<T, Rows> p, const SplitWorkspace ws) {
  using namespace flash_decode;
  constexpr int kDpl = (kHd + 31) / 32;
  SERVEKIT_SHARED(SharedStorage<kHd>, s);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int i = blockIdx.x, h = blockIdx.y, split = blockIdx.z * kWarps + warp;
  const int r = query_row(p, i);
  const int slot = p.slot[r];
  // This warp's rows; lo > hi when the split lies past the row (its state stays empty).
  const int lo = p.first[r] + split * attn::kSplitRows;
  const int hi = imin(p.row[r], lo + attn::kSplitRows - 1);
  for (int d = threadIdx.x; d < kHd; d += kThreads)
    s.q[d] = p.qkv[static_cast<int64_t>(r) * 3 * p.C + h * kHd + d] * p.scale;
  __syncthreads();

  attn::State<kDpl> st = attn::empty_state<kDpl>();
  for (int t0 = lo; t0 <= hi; t0 += BK) {
    const int t = t0 + lane;
    float sc = -INFINITY;
    int64_t off = -1;  // past the split: value 0 (tile_step reads it after its __syncwarp)
    if (t <= hi) {
      off = p.kv.rows(slot, t) + h * kHd;
      sc = 0.f;
#pragma unroll
      for (int d = 0; d < kHd; ++d) sc = fmaf(s.q[d], p.kv.key(off + d), sc);
    }
    s.row[warp][lane] = off;
    const int64_t* rows = s.row[warp];
    attn::tile_step<kHd>(st, sc, s.p[warp], lane,
                         [&](int j, int d) { return rows[j] < 0 ? 0.f : p.kv.value(rows[j] + d); });
  }
  if (ws.splits > kWarps) {  // every split's state goes to the workspace; combine merges them
    if (split >= ws.splits) return;
    const int64_t state = (static_cast<int64_t>(i) * p.n_head + h) * ws.splits + split;
    if (lane == 0) ws.m[state] = st.m, ws.l[state] = st.l;
#pragma unroll
    for (int c = 0; c < kDpl; ++c) {
      const int d = lane + 32 * c;
      if (d < kHd) ws.acc[state * kHd + d] = st.acc[c];
    }
    return;
  }
  if (lane == 0) s.m[warp] = st.m, s.l[warp] = st.l;
#pragma unroll
  for (int c = 0; c < kDpl; ++c) {
    const int d = lane + 32 * c;
    if (d < kHd) s.acc[warp][d] = st.acc[c];
  }
  __syncthreads();
  for (int d = threadIdx.x; d < kHd; d += kThreads) {
    float mt = -INFINITY, lt = 0.f, ot = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      if (s.m[w] == -INFINITY) continue;  // a split past the row's end
      const attn::MergeWeights mw = attn::merge_weights(mt, s.m[w]);
      lt = attn::merged(lt, s.l[w], mw);
      ot = attn::merged(ot, s.acc[w][d], mw);
    }
    p.out[static_cast<int64_t>(r) * p.C + h * kHd + d] = ot / lt;
  }
}

// Merges the splits of one (row, head) in order, as the decode kernel does for kWarps of them.
template <int kHd>
__global__ void __launch_bounds__(kHd)
    attention_combine_kernel(float* out,  // (the step's rows, C)
                             const SplitWorkspace ws, int C, int n_head,
                             const int32_t* rows) {  // (N) as AttentionParams::rows
  const int i = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const int r = rows ? rows[i] : i;
  const int64_t base = (static_cast<int64_t>(i) * n_head + h) * ws.splits;
  float mt = -INFINITY, lt = 0.f, ot = 0.f;
  for (int sp = 0; sp < ws.splits; ++sp) {
    const float m = ws.m[base + sp];
    if (m == -INFINITY) continue;  // a split past the end of this row's sequence
    const attn::MergeWeights mw = attn::merge_weights(mt, m);
    lt = attn::merged(lt, ws.l[base + sp], mw);
    ot = attn::merged(ot, ws.acc[(base + sp) * kHd + d], mw);
  }
  out[static_cast<int64_t>(r) * C + h * kHd + d] = ot / lt;
}

// max_rows bounds row[r] - first[r] + 1 over the rows and sets the number of splits;
// `workspace` holds decode_workspace_floats(N, C, n_head, decode_splits(max_rows)) floats.
template <class T, class Rows>
void attention_decode(const AttentionParams<T, Rows>& p, int max_rows, float* workspace,
                      simt::stream_handle stream = nullptr) {
  constexpr const char* who = "kernels::attention_decode";
  const int hd = check_heads(who, p.C, p.n_head);
  if (p.N < 1) fail(who, ": cannot run N = ", p.N, " query rows");
  if (max_rows < 1) fail(who, ": max_rows = ", max_rows, " must be at least 1");
  if (p.n_head > 65535) fail(who, ": n_head = ", p.n_head, " exceeds the grid's y limit 65535");
  const int splits = decode_splits(max_rows);
  if (splits > 65535) fail(who, ": max_rows = ", max_rows, " needs more than 65535 splits");
  if (splits > flash_decode::kWarps && !workspace)
    fail(who, ": max_rows = ", max_rows, " needs ", splits, " splits and a workspace, got none");
  const std::size_t states = static_cast<std::size_t>(p.N) * p.n_head * splits;
  const SplitWorkspace ws{workspace, workspace + states, workspace + 2 * states, splits};
  // With a combine, the splits' states go through the workspace: written here, read there.
  const std::size_t ws_bytes =
      splits > flash_decode::kWarps ? decode_workspace_floats(p.N, p.C, p.n_head, splits) * 4 : 0;
  dispatch_head_dim(hd, who, p.C, p.n_head, [&]<int kHd>() {
    simt::expect_bytes(attention_io_bytes(p) + attention_kv_bytes(p, false) + ws_bytes);
    simt::launch(simt::kernel<attention_decode_kernel<T, Rows, kHd>>,
                 dim3(p.N, p.n_head, ceil_div(splits, flash_decode::kWarps)),
                 dim3(flash_decode::kThreads), 0, stream, p, ws);
    if (splits > flash_decode::kWarps) {
      simt::expect_bytes(ws_bytes + static_cast<std::size_t>(p.N) * p.C * sizeof(float));
      simt::launch(simt::kernel<attention_combine_kernel<kHd>>, dim3(p.N, p.n_head), dim3(kHd), 0,
                   stream, p.out, ws, p.C, p.n_head, p.rows);
    }
  });
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
