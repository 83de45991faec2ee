// SPDX-License-Identifier: Apache-2.0
#pragma once
// Attention for few query rows (decode: one row per sequence) over long caches. A block takes
// one (query row, head, split): the split is a range of kSplitRows cache rows, so a single long
// sequence still spreads over many blocks (flash-decoding). Inside a block each warp streams
// every 4th tile of 32 rows, one key per lane; the warps' running (max, sum, weighted V) are
// merged in shared memory. With one split the block writes the output; otherwise it writes its
// partial state to a workspace and attention_combine merges the splits.
#include "servekit/kernels/attention_prefill.hpp"  // AttentionParams

namespace servekit::kernels {

namespace flash_decode {
constexpr int kWarps = 4, kThreads = kWarps * 32, BK = 32;
constexpr int kSplitRows = 256;  // cache rows per split

template <int kHd>
struct SharedStorage {
  float q[kHd];
  float p[kWarps][BK];
  float m[kWarps], l[kWarps];
  float acc[kWarps][kHd];
};
}  // namespace flash_decode

// Partial results of the splits, (N, n_head, splits) states: max, sum and unnormalised output.
struct SplitWorkspace {
  float* m;    // (N, n_head, splits)
  float* l;    // (N, n_head, splits)
  float* acc;  // (N, n_head, splits, head_dim)
  int splits;
};

inline int decode_splits(int max_rows) {
  return imax(1, ceil_div(max_rows, flash_decode::kSplitRows));
}
// Floats of workspace for N rows: m, l, acc back to back.
inline std::size_t decode_workspace_floats(int N, int C, int n_head, int splits) {
  return splits == 1 ? 0
                     : static_cast<std::size_t>(N) * n_head * splits * 2 +
                           static_cast<std::size_t>(N) * C * splits;
}

template <class T, class Rows, int kHd>
__global__ void __launch_bounds__(flash_decode::kThreads)
    attention_decode_kernel(const AttentionParams<T, Rows> p, const SplitWorkspace ws) {
  using namespace flash_decode;
  constexpr int kDpl = (kHd + 31) / 32;
  __shared__ __align__(16) SharedStorage<kHd> s;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = blockIdx.x, h = blockIdx.y, split = blockIdx.z;
  const int slot = p.slot[r];
  const int lo = imax(p.first[r], p.first[r] + split * kSplitRows);
  const int hi = imin(p.row[r], p.first[r] + (split + 1) * kSplitRows - 1);
  for (int d = threadIdx.x; d < kHd; d += kThreads)
    s.q[d] = p.qkv[static_cast<int64_t>(r) * 3 * p.C + h * kHd + d] * p.scale;
  __syncthreads();

  float m = -INFINITY, l = 0.f, acc[kDpl] = {};
  for (int t0 = lo + warp * BK; t0 <= hi; t0 += kWarps * BK) {
    const int t = t0 + lane;
    const bool valid = t <= hi;
    int64_t off = 0;
    float sc = -INFINITY;
    if (valid) {
      off = p.kv.rows(slot, t) + h * kHd;
      sc = 0.f;
#pragma unroll
      for (int d = 0; d < kHd; ++d) sc = fmaf(s.q[d], to_f32(p.kv.k[off + d]), sc);
    }
    const float m_new = fmaxf(m, warp_max(sc));  // the tile's first key is always valid
    const float corr = expf(m - m_new);
    const float pr = valid ? expf(sc - m_new) : 0.f;
    l = l * corr + warp_sum(pr);
    m = m_new;
    s.p[warp][lane] = pr;
    __syncwarp();
    const int n_keys = imin(BK, hi - t0 + 1);
#pragma unroll
    for (int c = 0; c < kDpl; ++c) {
      const int d = lane + 32 * c;
      if (d >= kHd) break;
      float o = acc[c] * corr;
      for (int j = 0; j < n_keys; ++j)
        o = fmaf(s.p[warp][j], to_f32(p.kv.v[p.kv.rows(slot, t0 + j) + h * kHd + d]), o);
      acc[c] = o;
    }
    __syncwarp();
  }
  if (lane == 0) s.m[warp] = m, s.l[warp] = l;
#pragma unroll
  for (int c = 0; c < kDpl; ++c) {
    const int d = lane + 32 * c;
    if (d < kHd) s.acc[warp][d] = acc[c];
  }
  __syncthreads();
  // Merge the warps (a warp that saw no row has m = -inf and weighs 0).
  float mx = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, s.m[w]);
  float wgt[kWarps], sum = 0.f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    wgt[w] = s.m[w] == -INFINITY ? 0.f : expf(s.m[w] - mx);
    sum += wgt[w] * s.l[w];
  }
  const int64_t state = (static_cast<int64_t>(r) * p.n_head + h) * ws.splits + split;
  for (int d = threadIdx.x; d < kHd; d += kThreads) {
    float o = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o = fmaf(wgt[w], s.acc[w][d], o);
    if (ws.splits == 1)
      p.out[static_cast<int64_t>(r) * p.C + h * kHd + d] = o / sum;
    else
      ws.acc[state * kHd + d] = o;
  }
  if (ws.splits > 1 && threadIdx.x == 0) ws.m[state] = mx, ws.l[state] = sum;
}

// out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s over the splits of one (row, head).
template <int kHd>
__global__ void __launch_bounds__(kHd)
    attention_combine_kernel(float* out,  // (N, C)
                             const SplitWorkspace ws, int C, int n_head) {
  const int r = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const int64_t base = (static_cast<int64_t>(r) * n_head + h) * ws.splits;
  float mx = -INFINITY;
  for (int sp = 0; sp < ws.splits; ++sp) mx = fmaxf(mx, ws.m[base + sp]);
  float num = 0.f, den = 0.f;
  for (int sp = 0; sp < ws.splits; ++sp) {
    const float m = ws.m[base + sp];
    if (m == -INFINITY) continue;  // a split past the end of this row's sequence
    const float w = expf(m - mx);
    num = fmaf(w, ws.acc[(base + sp) * kHd + d], num);
    den = fmaf(w, ws.l[base + sp], den);
  }
  out[static_cast<int64_t>(r) * C + h * kHd + d] = num / den;
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
  if (splits > 1 && !workspace)
    fail(who, ": max_rows = ", max_rows, " needs ", splits, " splits and a workspace, got none");
  const std::size_t states = static_cast<std::size_t>(p.N) * p.n_head * splits;
  const SplitWorkspace ws{workspace, workspace + states, workspace + 2 * states, splits};
  dispatch_head_dim(hd, who, p.C, p.n_head, [&]<int kHd>() {
    simt::launch(simt::kernel<attention_decode_kernel<T, Rows, kHd>>, dim3(p.N, p.n_head, splits),
                 dim3(flash_decode::kThreads), 0, stream, p, ws);
    if (splits > 1)
      simt::launch(simt::kernel<attention_combine_kernel<kHd>>, dim3(p.N, p.n_head), dim3(kHd), 0,
                   stream, p.out, ws, p.C, p.n_head);
  });
}

}  // namespace servekit::kernels
