// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// The LoRA delta of one linear on the device, y[r] += scale_a * (x[r] A_a^T) B_a^T for each row
// r whose adapter a = ad[r] adapts it, in two steps: shrink v = scale x A^T (rank values per
// row, into a scratch of max_rank per row) and expand y += v B^T. Each adapter keeps its own
// rank and its own matrices (a table of pointers per slot), so nothing is padded or copied.
//
//   gathered (BGMV, punica): one block per (row, kLoraWarps rank rows of A), a warp a rank row
//     (shrink), and threads take output columns (expand). A and B are read once per row. (One
//     block a row walking every rank row left a batch-1 decode step's 48 shrinks on one SM
//     each: 2.9x the base step on an H100.)
//   segmented (SGMV, punica / S-LoRA): rows grouped by adapter (the host sorts them: `order`,
//     segment bounds and adapters), one block per (segment, kLoraWarps rank rows, kSegRows rows)
//     for shrink and per (segment, 128 columns, kSegRows rows) for expand, so A and B are read
//     from memory once per kSegRows rows of a segment (A's rows from L1 for the later rows, B
//     held in registers) while those rows stream past. (Whole segments a block, one adapter for
//     a batch of 64 prompts was 16 blocks walking 8192 rows: 27x the base prefill on an H100.)
//     A row's sums are the gathered kernels' (ranks up to kSegExpandRanks): the same bits.
//   loop: the gathered kernels once per distinct adapter, keeping that adapter's rows (`only`),
//     as the course's loop of masked passes.
#include "servekit/kernels/common.hpp"
#include "servekit/kernels/lora_args.hpp"

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

__device__ SERVEKIT_SIMT_INLINE const LoraMats* lora_mats(const LoraParams& p, int32_t a) {
  if (a < 0 || a >= p.n_slots || (p.only >= 0 && a != p.only)) return nullptr;
  const LoraMats* m = p.tab + a;
  return m->present() ? m : nullptr;
}

constexpr int kLoraWarps = 4;
constexpr int kLoraThreads = 128;

// v[r, j] = scale * <A[j], x[r]>: block (row, kLoraWarps rank rows), a warp per rank row.
// Kernels are templates, so that several translation units may include this header.
template <int kUnused = 0>
__global__ void __launch_bounds__(kLoraThreads) lora_shrink_rows_kernel(const LoraParams p) {
  const int r = blockIdx.x;
  const LoraMats* m = lora_mats(p, p.ad[r]);
  const int lane = threadIdx.x % 32, j = blockIdx.y * kLoraWarps + threadIdx.x / 32;
  if (!m || j >= m->rank) return;  // no barrier below
  const float* x = p.x + static_cast<int64_t>(r) * p.K;
  const float* a = m->a + static_cast<int64_t>(j) * p.K;
  float s = 0.f;
  for (int k = lane; k < p.K; k += 32) s = fmaf(a[k], x[k], s);
  s = warp_sum(s);
  if (lane == 0) p.v[static_cast<int64_t>(r) * p.max_rank + j] = m->scale * s;
}

// y[r, n] += <B[n], v[r]> (p.write: y[r, n] = 0 + that, and 0 for a row without a delta):
// blocks of 128 columns per row.
template <int kUnused = 0>
__global__ void __launch_bounds__(kLoraThreads) lora_expand_rows_kernel(const LoraParams p) {
  const int r = blockIdx.y;
  const LoraMats* m = lora_mats(p, p.ad[r]);
  const int n = blockIdx.x * kLoraThreads + threadIdx.x;
  if (n >= p.Nout) return;
  float* y = p.y + static_cast<int64_t>(r) * p.Nout + n;
  if (!m) {
    if (p.write) *y = 0.f;
    return;
  }
  const float* b = m->b + static_cast<int64_t>(n) * m->rank;
  const float* v = p.v + static_cast<int64_t>(r) * p.max_rank;
  float s = 0.f;
  for (int j = 0; j < m->rank; j++) s = fmaf(b[j], v[j], s);
  *y = (p.write ? 0.f : *y) + s;  // written: a zeroed row's bits
}

// Segmented shrink: block (segment, kLoraWarps rank rows, rows chunk), a warp per rank row j
// whose lanes take K as the gathered shrink's do, for each row of the chunk in turn: A[j] is
// read from memory once per chunk (the chunk's later rows find it in L1) and x[r] once per
// block (its warps read the same lines), with no barrier. Each v[r, j] is the gathered
// shrink's sum, the same bits, whatever the chunk. (A block per single rank row, its threads
// splitting K, read x[r] once per rank row and met two barriers per row.)
constexpr int kSegRows = 64;     // rows of a segment per block, at most
constexpr int kSegBlocks = 256;  // blocks a shrink launch should have at least (a few per SM)

// The rows of segment seg that block chunk `chunk` takes: [r0, r1) in `order`, empty past it.
__device__ SERVEKIT_SIMT_INLINE void seg_chunk(const LoraParams& p, int seg, int chunk, int& r0,
                                               int& r1) {
  const int s0 = p.seg_start[seg], s1 = p.seg_start[seg + 1];
  r0 = imin(s1, s0 + chunk * p.seg_chunk), r1 = imin(s1, r0 + p.seg_chunk);
}

template <int kUnused = 0>
__global__ void __launch_bounds__(kLoraThreads) lora_shrink_segments_kernel(const LoraParams p) {
  const int seg = blockIdx.x;
  const LoraMats* m = lora_mats(p, p.seg_ad[seg]);
  const int lane = threadIdx.x % 32, j = blockIdx.y * kLoraWarps + threadIdx.x / 32;
  if (!m || j >= m->rank) return;  // no barrier below
  int r0, r1;
  seg_chunk(p, seg, blockIdx.z, r0, r1);
  const float* a = m->a + static_cast<int64_t>(j) * p.K;
  for (int i = r0; i < r1; i++) {
    const int r = p.order[i];
    const float* x = p.x + static_cast<int64_t>(r) * p.K;
    float s = 0.f;
    for (int k = lane; k < p.K; k += 32) s = fmaf(a[k], x[k], s);
    s = warp_sum(s);
    if (lane == 0) p.v[static_cast<int64_t>(r) * p.max_rank + j] = m->scale * s;
  }
}

// Segmented expand: block (128 columns, segment, rows chunk). Each thread holds its column's B
// row, kSegExpandRanks ranks at a time, in registers while the chunk's rows go by; a row's
// output is read and written once per kSegExpandRanks ranks (once up to rank 16, where its sum
// is the gathered expand's chain over j: the same bits).
constexpr int kSegExpandRanks = 16;
template <int kUnused = 0>
__global__ void __launch_bounds__(kLoraThreads) lora_expand_segments_kernel(const LoraParams p) {
  const int seg = blockIdx.y;
  const int n = blockIdx.x * kLoraThreads + threadIdx.x;
  if (n >= p.Nout) return;
  auto y = [&](int i) -> float& { return p.y[static_cast<int64_t>(p.order[i]) * p.Nout + n]; };
  if (seg == p.n_seg) {  // p.write's last segment: the rows of none (order's tail), zeroed
    const int z = blockIdx.z, nz = gridDim.z;
    for (int i = p.seg_start[p.n_seg] + z; i < p.N; i += nz) y(i) = 0.f;
    return;
  }
  const LoraMats* m = lora_mats(p, p.seg_ad[seg]);
  int r0, r1;
  seg_chunk(p, seg, blockIdx.z, r0, r1);
  if (!m) {
    if (p.write)
      for (int i = r0; i < r1; i++) y(i) = 0.f;
    return;
  }
  const float* b = m->b + static_cast<int64_t>(n) * m->rank;
  for (int j0 = 0; j0 < m->rank; j0 += kSegExpandRanks) {
    float breg[kSegExpandRanks];
#pragma unroll
    for (int c = 0; c < kSegExpandRanks; c++) breg[c] = j0 + c < m->rank ? b[j0 + c] : 0.f;
    for (int i = r0; i < r1; i++) {
      const float* v = p.v + static_cast<int64_t>(p.order[i]) * p.max_rank + j0;
      float s = 0.f;
#pragma unroll
      for (int c = 0; c < kSegExpandRanks; c++)
        if (j0 + c < m->rank) s = fmaf(breg[c], v[c], s);
      y(i) = (p.write && j0 == 0 ? 0.f : y(i)) + s;
    }
  }
}

// The global-memory bytes of one LoRA launch (simt::expect_bytes), block by block as the
// kernels read and write: each block's distinct bytes (what its warps, or its later rows, read
// again comes from L1), what several blocks read counted for each (an L2 may serve the
// repeats). The rows' slots and the adapters' ranks are read on the host, so this is known
// under the emulator (device memory is host memory) while a LaunchLog keeps the launches and
// nothing is being captured; 0 otherwise, and under nvcc (as attention_kv_bytes).
enum class LoraLaunch { kGatheredShrink, kGatheredExpand, kSegmentedShrink, kSegmentedExpand };
inline std::size_t lora_bytes(const LoraParams& p, LoraLaunch launch) {
#if defined(SERVEKIT_SIMT_HOST)
  if (!simt::logging_launches() || simt::capturing_on_host()) return 0;
  constexpr std::size_t F = sizeof(float), I = sizeof(int32_t), T = sizeof(LoraMats);
  const std::size_t K = p.K;
  const int col_blocks = ceil_div(p.Nout, kLoraThreads);
  auto cols = [&](int bx) {
    return static_cast<std::size_t>(imin(kLoraThreads, p.Nout - bx * kLoraThreads));
  };
  // The rank rows a shrink block (its grid.y = y) takes of an adapter of rank R.
  auto rank_rows = [&](int y, int R) {
    return static_cast<std::size_t>(imax(0, imin(kLoraWarps, R - y * kLoraWarps)));
  };
  std::size_t bytes = 0;
  if (launch == LoraLaunch::kGatheredShrink || launch == LoraLaunch::kGatheredExpand) {
    for (int r = 0; r < p.N; r++) {
      const LoraMats* m = lora_mats(p, p.ad[r]);
      if (launch == LoraLaunch::kGatheredShrink) {
        for (int y = 0; y < ceil_div(p.max_rank, kLoraWarps); y++) {
          const std::size_t nj = m ? rank_rows(y, m->rank) : 0;
          bytes += I + (nj ? T + K * F + nj * (K + 1) * F : 0);  // x, A's rows, v
        }
      } else {
        for (int bx = 0; bx < col_blocks; bx++)  // B's columns, v, y read (unless p.write), written
          bytes += I + (m ? T + (cols(bx) * m->rank + m->rank + (2 - p.write) * cols(bx)) * F
                        : p.write ? cols(bx) * F
                                  : 0);
      }
    }
    return bytes;
  }
  const int chunks = ceil_div(p.seg_rows > 0 ? imin(p.seg_rows, p.N) : p.N, p.seg_chunk);
  const bool expand = launch == LoraLaunch::kSegmentedExpand;
  if (expand && p.write)  // the rows of no segment zeroed
    bytes += static_cast<std::size_t>(p.N - p.seg_start[p.n_seg]) * (I + p.Nout * F);
  for (int seg = 0; seg < p.n_seg; seg++) {
    const LoraMats* m = lora_mats(p, p.seg_ad[seg]);
    if (!m && expand && p.write)  // a segment whose adapter skips the linear zeroed
      bytes += static_cast<std::size_t>(p.seg_start[seg + 1] - p.seg_start[seg]) * (I + p.Nout * F);
    if (!m) continue;
    const std::size_t R = m->rank;
    for (int c = 0; c < chunks; c++) {
      int r0, r1;
      seg_chunk(p, seg, c, r0, r1);
      const std::size_t rows = imax(0, r1 - r0);
      if (!expand) {
        for (int y = 0; y < ceil_div(p.max_rank, kLoraWarps); y++)
          if (const std::size_t nj = rank_rows(y, m->rank); nj && rows)  // A's rows; x, v a row
            bytes += T + nj * K * F + rows * (I + K * F + nj * F);
      } else if (rows) {
        // y read and written once a pass (p.write: written only, the first)
        const std::size_t ys = 2 * ceil_div(m->rank, kSegExpandRanks) - p.write;
        for (int bx = 0; bx < col_blocks; bx++)  // B's columns; v and y a row
          bytes += T + cols(bx) * R * F + rows * (I + (R + ys * cols(bx)) * F);
      }
    }
  }
  return bytes;
#else
  (void)p, (void)launch;
  return 0;
#endif
}

inline void check_lora(const LoraParams& p, const char* who) {
  if (p.N < 1 || p.K < 1 || p.Nout < 1 || p.max_rank < 1 || p.n_slots < 1)
    fail(who, ": cannot run N = ", p.N, ", K = ", p.K, ", Nout = ", p.Nout,
         ", max_rank = ", p.max_rank, ", slots = ", p.n_slots);
}

// Gathered (BGMV), or with p.only >= 0 one masked pass of the loop policy.
inline void lora_gathered(const LoraParams& p, simt::stream_handle stream = nullptr) {
  check_lora(p, "kernels::lora_gathered");
  simt::expect_bytes(lora_bytes(p, LoraLaunch::kGatheredShrink));
  simt::launch(simt::kernel<lora_shrink_rows_kernel<>>, dim3(p.N, ceil_div(p.max_rank, kLoraWarps)),
               dim3(kLoraThreads), 0, stream, p);
  simt::expect_bytes(lora_bytes(p, LoraLaunch::kGatheredExpand));
  simt::launch(simt::kernel<lora_expand_rows_kernel<>>, dim3(ceil_div(p.Nout, kLoraThreads), p.N),
               dim3(kLoraThreads), 0, stream, p);
}

// The rows of a segment a block takes: kSegRows, or fewer (down to 4) where the shrink would
// otherwise have fewer than kSegBlocks blocks: one adapter for a decode step's 64 rows was 16
// blocks (one per rank row) each walking all 64 rows, 3.7x the base step on an H200. A row's sum
// is the same whatever its chunk, so this changes no bits.
inline int seg_chunk_rows(const LoraParams& p) {
  const int rows = p.seg_rows > 0 ? imin(p.seg_rows, p.N) : p.N;  // the longest segment
  const long ranks = ceil_div(p.max_rank, kLoraWarps);            // the shrink's grid.y
  int c = kSegRows;
  while (c > 4 && p.n_seg * ranks * ceil_div(rows, c) < kSegBlocks) c /= 2;
  return c;
}

// Segmented (SGMV): p.order, p.seg_start, p.seg_ad describe the groups (and, for p.write,
// order's tail after the last group the rows of none).
inline void lora_segmented(const LoraParams& p, simt::stream_handle stream = nullptr) {
  check_lora(p, "kernels::lora_segmented");
  const int segs = p.n_seg + p.write;  // p.write: a last one zeroes the rows of none
  if (segs < 1) return;
  LoraParams q = p;
  q.seg_chunk = seg_chunk_rows(p);
  const int chunks = ceil_div(p.seg_rows > 0 ? imin(p.seg_rows, p.N) : p.N, q.seg_chunk);
  if (p.n_seg > 0) {
    simt::expect_bytes(lora_bytes(q, LoraLaunch::kSegmentedShrink));
    simt::launch(simt::kernel<lora_shrink_segments_kernel<>>,
                 dim3(p.n_seg, ceil_div(p.max_rank, kLoraWarps), chunks), dim3(kLoraThreads), 0,
                 stream, q);
  }
  simt::expect_bytes(lora_bytes(q, LoraLaunch::kSegmentedExpand));
  simt::launch(simt::kernel<lora_expand_segments_kernel<>>,
               dim3(ceil_div(p.Nout, kLoraThreads), segs, chunks), dim3(kLoraThreads), 0, stream,
               q);
}

// x[0 .. n) = 0: the delta buffer the loop policy's passes add into (gathered and segmented
// write it: LoraParams::write).
template <int kUnused = 0>
__global__ void __launch_bounds__(256) zero_kernel(float* x, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
  if (i < n) x[i] = 0.f;
}
inline void zero(float* x, int64_t n, simt::stream_handle stream = nullptr) {
  if (n < 1) return;
  simt::expect_bytes(static_cast<std::size_t>(n) * sizeof(float));
  simt::launch(simt::kernel<zero_kernel<>>, dim3(static_cast<unsigned>((n + 255) / 256)), dim3(256),
               0, stream, x, n);
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
