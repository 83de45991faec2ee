// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// out = epilogue(x @ W + b) for more than gemv::kMaxM rows of x (prefill) on CUDA cores, W
// stored (K, N): the tiled GEMM shared by every CUDA-core weight format, the format being one
// of linear_gemv.hpp's loaders (F32Cols, U8Cols). Its W tile is staged in shared memory as
// stored (fp32 words, or raw codes: 1 KiB a stage instead of 4 KiB) and widened in registers.
// A (64 x 64) tile of out per block of 256 threads, each thread a (4 x 4) register tile; x and
// W tiles of BK = 16 rows, so each staged element feeds 4 multiply-adds from registers.
// Sums fold where cuda_core_order's slices and parts end (codes: also where a group ends), so a
// row gets the GEMV's bits. A launch of at most BM rows (one row tile: a decode step of 9 to 64
// sequences) has only ceil(N / 64) blocks, 12 to 48 for GPT-2 small's linears against 132 SMs;
// with a SplitK workspace it takes one block per (column tile, K part) instead, and the last
// block of a tile adds the parts in order from zero, as the unsplit kernel's total does.
#include "servekit/kernels/linear_gemv.hpp"

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

namespace tiled {
constexpr int BM = 64, BN = 64, BK = 16, TM = 4, TN = 4;
constexpr int kThreads = (BM / TM) * (BN / TN);  // 256
static_assert(BM * BK % kThreads == 0 && BK * BN % kThreads == 0);

template <class Raw>
struct SharedStorage {
  float a[BK][BM + 4];  // x tile, transposed: a thread's TM rows are adjacent
  Raw b[BK][BN];        // W tile, as stored
};
}  // namespace tiled

template <Epilogue E, class W>
__global__ void __launch_bounds__(tiled::kThreads) linear_tiled_kernel(const CoreParams<W> p) {
  using namespace tiled;
  using Raw = typename W::Raw;
  SERVEKIT_SHARED(SharedStorage<Raw>, s);
  const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const KOrder o = p.order;
  float total[TM][TN] = {};  // the finished parts' sums
  float sum[TM][TN] = {};    // ... the current part's finished slices'
  float acc[TM][TN] = {};    // ... the current slice's (codes: its finished segments')
  float seg[TM][TN] = {};    // codes: sum x q over the current segment
  float xsum[TM] = {};       // codes: sum x over the current segment
  // Split: this block's part only. Parts are whole slices of whole BK steps.
  const bool splits = p.split.partial != nullptr;
  const int k_begin = splits ? blockIdx.z * o.part_len : 0;
  const int k_end = splits ? imin(p.K, k_begin + o.part_len) : p.K;
  for (int k0 = k_begin; k0 < k_end; k0 += BK) {
    // Out-of-range elements are staged as zeros: they add nothing to any sum.
#pragma unroll
    for (int i = threadIdx.x; i < BM * BK; i += kThreads) {
      const int r = i / BK, k = i % BK;
      const int gm = m0 + r, gk = k0 + k;
      s.a[k][r] = gm < p.M && gk < p.K ? p.x[static_cast<int64_t>(gm) * p.K + gk] : 0.f;
    }
#pragma unroll
    for (int i = threadIdx.x; i < BK * BN; i += kThreads) {
      const int k = i / BN, c = i % BN;
      const int gk = k0 + k, gn = n0 + c;
      s.b[k][c] = gk < p.K && gn < p.N ? p.w.raw(gk, gn) : Raw{0};
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = s.a[k][ty * TM + i];
#pragma unroll
      for (int j = 0; j < TN; ++j) b[j] = W::widen(s.b[k][tx * TN + j]);
      if constexpr (W::kGrouped) {
#pragma unroll
        for (int i = 0; i < TM; ++i) {
          xsum[i] += a[i];
#pragma unroll
          for (int j = 0; j < TN; ++j) seg[i][j] = fmaf(a[i], b[j], seg[i][j]);
        }
        // The same k for the whole block: a uniform branch. G divides K, so the last group
        // ends at k = K - 1; the zero rows staged past K end no segment.
        const int gk = k0 + k;
        if (gk < p.K && segment_ends(gk, p.w.group_rows, o.slice_len())) {
          const int g = gk / p.w.group_rows;
          fold_segment(acc, seg, xsum, [&](int j) { return p.w.state(g, n0 + tx * TN + j); });
        }
      } else {
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
      }
    }
    __syncthreads();
    if (o.slice_ends(k0, BK, p.K)) {
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) sum[i][j] += acc[i][j], acc[i][j] = 0.f;
    }
    if (o.part_ends(k0, BK, p.K)) {
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) total[i][j] += sum[i][j], sum[i][j] = 0.f;
    }
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int m = m0 + ty * TM + i;
    if (m >= p.M) break;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int n = n0 + tx * TN + j;
      if (n >= p.N) continue;
      if (splits)
        p.split.partial[(static_cast<int64_t>(blockIdx.z) * p.M + m) * p.N + n] = total[i][j];
      else
        store_epilogue<E>(p.out + static_cast<int64_t>(m) * p.N + n,
                          with_addend(total[i][j] + (p.b ? p.b[n] : 0.f), p.add, m, n, p.N));
    }
  }
  if (splits)
    split_k_finish<E>(p.split, o.parts, blockIdx.x, 0, p.M, n0, BN, p.M, p.N, p.b, p.add, p.out);
}

// The split-K scratch of CUDA-core launches (the GEMV's and the tiled GEMM's) of up to M rows
// over a (K, N) weight: the tiled GEMM splits launches of up to BM rows.
inline SplitSize core_split_size(int M, int K, int N) {
  return split_size(cuda_core_order(K, N), tiled::BM, gemv::kCols, tiled::BM, M, N);
}

// Launches the tiled kernel, split over K when the launch is one row tile and `p.split` has
// room for it. w_bytes: the weight's bytes with its quantisation state, for the launch record.
template <Epilogue E, class W>
void linear_tiled(CoreParams<W> p, std::size_t w_bytes, simt::stream_handle stream) {
  using namespace tiled;
  const int tiles = ceil_div(p.N, BN);
  const bool splits = splits_k(p.split, p.order, p.M, BM, p.N, tiles);
  if (!splits) p.split = {};
  const int parts = splits ? p.order.parts : 1;
  simt::expect_bytes(linear_bytes(E, p.M, p.K, p.N, w_bytes, BM, BN, p.b, p.add) +
                     split_k_bytes(splits, parts, p.M, p.N));
  simt::launch(simt::kernel<linear_tiled_kernel<E, W>>, dim3(tiles, ceil_div(p.M, BM), parts),
               dim3(kThreads), 0, stream, p);
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
