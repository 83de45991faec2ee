// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// The segmented LoRA delta (SGMV, kernels/lora.hpp) on tensor cores, for adapters kept in fp16
// or bf16 (LoraMats::a16, b16: a 16-bit composition converts them at load, as its base
// weights). mma.sync.m16n8k16 with fp32 accumulate, as linear_mma, with every operand loaded
// straight from global memory into its fragment: a lane's elements of a fragment are pairs of
// adjacent k, one 32-bit word of A16 or B16, so there is nothing for shared memory to reorder,
// and the tiles are too thin (a rank of 4..64) to pay for staging.
//
//   shrink: block (segment, kMmaRanks rank rows, chunk of up to kMmaTiles tiles of 16 rows,
//     part of K): K is cut into parts of kPartK (fixed by K alone), a block's four warps take a
//     quarter of its part each, A's fragments for a k16 step loaded once and multiplied against
//     every row tile of the chunk; the quarters are added in order through shared memory and
//     the part's sum goes to its own slice of the scratch, v[part] = x A^T over the part; the
//     last block of a chunk to finish adds the parts, in order, into v = scale * sum. The
//     parts are the shrink's parallelism, not rows: one adapter for 64 rows is 3..12 blocks
//     reading A once, not 4 reading it 4 times in chunks of 16 rows.
//   expand y += v B^T: block (kMmaCols columns, segment, chunk), a warp 32 columns (four n8
//     tiles): B's fragments for a k16 step of rank held in registers while the chunk's row
//     tiles go by; v is rounded to 16 bits as it is loaded (x likewise in the shrink).
//
// Rows are padded to whole tiles with zeros, and a row's sums never meet another row's, so a
// row gets the same bits whether its segment holds 1 row or 8192, whatever its chunk: every row
// of a 16-bit composition's segmented step goes through here, never through the SIMT kernels,
// whose bits differ. A row's delta does not depend on what shares its step.
#include "servekit/kernels/common.hpp"
#include "servekit/kernels/linear_mma.hpp"  // to_b16, mma16816
#include "servekit/kernels/lora.hpp"        // lora_mats, seg_chunk, check_lora
#include "servekit/kernels/lora_args.hpp"

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

namespace lora_mma {
constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kTile = 16;                 // rows of an mma tile
constexpr int kMmaTiles = 4;              // row tiles a block takes at most: 64 rows
constexpr int kMmaRanks = kLoraMmaRanks;  // rank rows a shrink block takes: two n8 tiles
constexpr int kMmaCols = 32 * kWarps;     // columns an expand block takes
constexpr int kPartK = kLoraMmaPartK;     // K a shrink block takes: 4 k16 steps a warp
}  // namespace lora_mma

// Two adjacent 16-bit values as the fragment register that holds them (the first low).
__device__ SERVEKIT_SIMT_INLINE std::uint32_t pair16(const std::uint16_t* p) {
  return *reinterpret_cast<const std::uint32_t*>(p);
}
template <bool kBf16>
__device__ SERVEKIT_SIMT_INLINE std::uint32_t pack16(float lo, float hi) {
  return static_cast<std::uint32_t>(to_b16<kBf16>(lo)) |
         static_cast<std::uint32_t>(to_b16<kBf16>(hi)) << 16;
}

// v[part, r, j] = <A[j], x[r]> over K's part `part`, for the rows r of this block's chunk and
// its kMmaRanks ranks.
template <bool kBf16>
__global__ void __launch_bounds__(lora_mma::kThreads) lora_shrink_mma_kernel(const LoraParams p) {
  using namespace lora_mma;
  SERVEKIT_SHARED(float[kWarps][kMmaTiles][2][4][32], part);  // each warp's part sums
  const int seg = blockIdx.x, j0 = blockIdx.y * kMmaRanks;
  const LoraMats* m = lora_mats(p, p.seg_ad[seg]);
  if (!m || j0 >= m->rank) return;  // the whole block: before any barrier
  const int parts = lora_mma_parts(p.K), kp = blockIdx.z % parts;
  int r0, r1;
  seg_chunk(p, seg, blockIdx.z / parts, r0, r1);
  if (r0 >= r1) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int tiles = ceil_div(r1 - r0, kTile);
  // Row `i` of tile ti (i < 16) in x, or -1 past the chunk: zeros.
  auto row = [&](int ti, int i) {
    return r0 + ti * kTile + i < r1 ? p.order[r0 + ti * kTile + i] : -1;
  };
  int rows[kMmaTiles][2];
#pragma unroll
  for (int ti = 0; ti < kMmaTiles; ti++) rows[ti][0] = row(ti, g), rows[ti][1] = row(ti, g + 8);
  // This warp's quarter of the part: steps of 16, fixed by K alone.
  constexpr int per = kPartK / 16 / kWarps;
  const int steps = p.K / 16, s0 = imin(steps, kp * kPartK / 16 + warp * per);
  const int s1 = imin(steps, s0 + per);
  float acc[kMmaTiles][2][4] = {};
  for (int s = s0; s < s1; s++) {
    const int k = s * 16 + 2 * t;
    std::uint32_t bf[2][2];  // (n8 tile, register): A16's rank rows j0 + 8 nt + g
#pragma unroll
    for (int nt = 0; nt < 2; nt++) {
      const int j = j0 + 8 * nt + g;
      const std::uint16_t* a = m->a16 + static_cast<int64_t>(j) * p.K + k;
      bf[nt][0] = j < m->rank ? pair16(a) : 0u;
      bf[nt][1] = j < m->rank ? pair16(a + 8) : 0u;
    }
#pragma unroll
    for (int ti = 0; ti < kMmaTiles; ti++) {
      if (ti >= tiles) break;  // the same for the whole warp
      std::uint32_t af[4];
#pragma unroll
      for (int h = 0; h < 2; h++) {  // rows g (registers 0, 2) and g + 8 (1, 3)
        const int r = rows[ti][h];
        // k is even and K a multiple of 16: each pair is one aligned 8-byte load
        af[h] = af[h + 2] = 0u;  // a row past the chunk: zeros, nothing loaded
        if (r >= 0) {
          const auto* x = reinterpret_cast<const float2*>(p.x + static_cast<int64_t>(r) * p.K + k);
          const float2 lo = x[0], hi = x[4];
          af[h] = pack16<kBf16>(lo.x, lo.y), af[h + 2] = pack16<kBf16>(hi.x, hi.y);
        }
      }
      mma16816<kBf16>(acc[ti][0], af, bf[0]);
      mma16816<kBf16>(acc[ti][1], af, bf[1]);
    }
  }
#pragma unroll
  for (int ti = 0; ti < kMmaTiles; ti++)
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
      for (int i = 0; i < 4; i++) part[warp][ti][nt][i][lane] = acc[ti][nt][i];
  __syncthreads();
  // Each output the four quarters' sum in order: thread w of the block takes fragment slots
  // w, w + 128, ... of (tile, n8 tile, element, lane).
  namespace L = simt::mma_layout;
  for (int e = threadIdx.x; e < kMmaTiles * 2 * 4 * 32; e += kThreads) {
    const int ln = e % 32, i = e / 32 % 4, nt = e / 128 % 2, ti = e / 256;
    if (ti >= tiles) break;
    const int r = row(ti, L::c_row(ln, i)), j = j0 + 8 * nt + L::c_col(ln, i);
    if (r < 0 || j >= m->rank) continue;
    float s = part[0][ti][nt][i][ln];
    for (int w = 1; w < kWarps; w++) s += part[w][ti][nt][i][ln];
    p.v[(static_cast<int64_t>(kp) * p.N + r) * p.max_rank + j] = parts == 1 ? m->scale * s : s;
  }
  if (parts == 1) return;
  // The block that arrives last at its (chunk, ranks) counter adds the parts in order into slice
  // 0, scaled, and sets the counter back to zero (split_k_finish's pattern): the expand reads
  // one v a row.
  SERVEKIT_SHARED(int, last);
  __threadfence();  // this block's part is visible before its arrival counts
  __syncthreads();
  int32_t* arrival = p.arrivals + static_cast<int64_t>(r0) * gridDim.y + blockIdx.y;
  if (threadIdx.x == 0) last = atomicAdd(arrival, 1) == parts - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();  // every other part is visible to this block
  // volatile: from L2, not from an L1 line an earlier launch may have left on this SM
  const volatile float* v = p.v;
  const int64_t slice = static_cast<int64_t>(p.N) * p.max_rank;
  for (int e = threadIdx.x; e < (r1 - r0) * kMmaRanks; e += kThreads) {
    const int j = j0 + e % kMmaRanks;
    if (j >= m->rank) continue;
    const int64_t at = static_cast<int64_t>(p.order[r0 + e / kMmaRanks]) * p.max_rank + j;
    float sum = v[at];
    for (int q = 1; q < parts; q++) sum += v[q * slice + at];
    p.v[at] = m->scale * sum;
  }
  if (threadIdx.x == 0) *arrival = 0;
}

// y[r, n] += <B[n], v[r]> (p.write: y = 0 + that; 0 for the rows of no segment, p.n_seg's
// extra segment, or of an adapter that skips the linear), for the chunk's rows and a warp's 32
// columns, 16 ranks (one k16 step) a pass: a row's output read and written once a pass.
template <bool kBf16>
__global__ void __launch_bounds__(lora_mma::kThreads) lora_expand_mma_kernel(const LoraParams p) {
  using namespace lora_mma;
  const int seg = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int n0 = blockIdx.x * kMmaCols + warp * 32;  // this warp's columns
  auto y = [&](int r, int n) -> float& { return p.y[static_cast<int64_t>(r) * p.Nout + n]; };
  auto zero_rows = [&](int i0, int i1, int step) {  // p.write: y = 0 on order[i0 .. i1)
    for (int i = i0; i < i1; i += step)
      for (int n = n0 + lane; n < imin(p.Nout, n0 + 32); n += 32) y(p.order[i], n) = 0.f;
  };
  if (seg == p.n_seg) {
    zero_rows(p.seg_start[p.n_seg] + blockIdx.z, p.N, gridDim.z);
    return;
  }
  const LoraMats* m = lora_mats(p, p.seg_ad[seg]);
  int r0, r1;
  seg_chunk(p, seg, blockIdx.z, r0, r1);
  if (!m) {
    if (p.write) zero_rows(r0, r1, 1);
    return;
  }
  const int R = m->rank, R2 = R + R % 2;  // B16's rows are R2 long (padded to whole pairs)
  namespace L = simt::mma_layout;
  for (int j0 = 0; j0 < R; j0 += 16) {
    std::uint32_t bf[4][2];  // (n8 tile, register): B16's row n, ranks j0 + 2t.., j0 + 8 + 2t..
#pragma unroll
    for (int nt = 0; nt < 4; nt++) {
      const int n = n0 + 8 * nt + g, j = j0 + 2 * t;
      const std::uint16_t* b = m->b16 + static_cast<int64_t>(n) * R2 + j;
      bf[nt][0] = n < p.Nout && j < R ? pair16(b) : 0u;
      bf[nt][1] = n < p.Nout && j + 8 < R ? pair16(b + 8) : 0u;
    }
    for (int i0 = r0; i0 < r1; i0 += kTile) {
      std::uint32_t af[4];
#pragma unroll
      for (int h = 0; h < 2; h++) {  // v's rows g (registers 0, 2) and g + 8 (1, 3)
        const int i = i0 + g + 8 * h;
        const float* v = p.v + static_cast<int64_t>(i < r1 ? p.order[i] : 0) * p.max_rank;
        auto at = [&](int j) { return i < r1 && j < R ? v[j] : 0.f; };
        af[h] = pack16<kBf16>(at(j0 + 2 * t), at(j0 + 2 * t + 1));
        af[h + 2] = pack16<kBf16>(at(j0 + 8 + 2 * t), at(j0 + 9 + 2 * t));
      }
      float acc[4][4] = {};
#pragma unroll
      for (int nt = 0; nt < 4; nt++) mma16816<kBf16>(acc[nt], af, bf[nt]);
#pragma unroll
      for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int i = i0 + L::c_row(lane, e), n = n0 + 8 * nt + L::c_col(lane, e);
          if (i >= r1 || n >= p.Nout) continue;
          float& out = y(p.order[i], n);
          out = (p.write && j0 == 0 ? 0.f : out) + acc[nt][e];
        }
    }
  }
}

// The global-memory bytes of one launch, as lora_bytes counts them: each block's distinct
// bytes (A16's rank rows and each row's x over the block's part of K once a shrink block, its
// four warps reading a quarter each, and the last block's parts; B16's columns and each row's v
// once an expand block, y once a pass of 16 ranks).
inline std::size_t lora_mma_bytes(const LoraParams& p, bool shrink) {
#if defined(SERVEKIT_SIMT_HOST)
  using namespace lora_mma;
  if (!simt::logging_launches() || simt::capturing_on_host()) return 0;
  constexpr std::size_t F = sizeof(float), I = sizeof(int32_t), T = sizeof(LoraMats), H = 2;
  const std::size_t K = p.K;
  const int col_blocks = ceil_div(p.Nout, kMmaCols);
  auto cols = [&](int bx) {
    return static_cast<std::size_t>(imin(kMmaCols, p.Nout - bx * kMmaCols));
  };
  const int chunks = ceil_div(p.seg_rows > 0 ? imin(p.seg_rows, p.N) : p.N, p.seg_chunk);
  const std::size_t P = lora_mma_parts(p.K);  // a shrink block each; K over them all
  std::size_t bytes = 0;
  auto zeroed = [&](int rows) {  // p.write's rows of no delta: y written
    bytes += static_cast<std::size_t>(rows) * (I + p.Nout * F);
  };
  if (!shrink && p.write) zeroed(p.N - p.seg_start[p.n_seg]);
  for (int seg = 0; seg < p.n_seg; seg++) {
    const LoraMats* m = lora_mats(p, p.seg_ad[seg]);
    if (!m && !shrink && p.write) zeroed(p.seg_start[seg + 1] - p.seg_start[seg]);
    if (!m) continue;
    const std::size_t R = m->rank, R2 = R + R % 2;
    for (int c = 0; c < chunks; c++) {
      int r0, r1;
      seg_chunk(p, seg, c, r0, r1);
      const std::size_t rows = imax(0, r1 - r0);
      if (!rows) continue;
      if (shrink) {
        for (int y = 0; y < ceil_div(p.max_rank, kMmaRanks); y++)
          if (const std::size_t nj = imax(0, imin(kMmaRanks, m->rank - y * kMmaRanks)))
            bytes += P * T + nj * K * H + rows * (P * I + K * F + P * nj * F) +  // A16; x, v
                     (P > 1 ? rows * (I + (P + 1) * nj * F) : 0);                // the parts added
      } else {
        const std::size_t ys = 2 * ceil_div(m->rank, 16) - p.write;  // y a pass
        for (int bx = 0; bx < col_blocks; bx++)                      // B16's columns; v and y a row
          bytes += T + cols(bx) * R2 * H + rows * (I + (R + ys * cols(bx)) * F);
      }
    }
  }
  return bytes;
#else
  (void)p, (void)shrink;
  return 0;
#endif
}

// Segmented (SGMV) on tensor cores: as lora_segmented, reading LoraMats::a16 and b16; p.v holds
// lora_mma_parts(K) x (N, max_rank) floats and p.arrivals lora_mma_counters(N, max_rank, parts)
// counters at zero (the kernels leave them so).
template <bool kBf16>
void lora_segmented_mma(const LoraParams& p, simt::stream_handle stream = nullptr) {
  using namespace lora_mma;
  const char* who =
      kBf16 ? "kernels::lora_segmented_mma (bf16)" : "kernels::lora_segmented_mma (f16)";
  check_lora(p, who);
  if (p.K % 16 != 0) fail(who, ": K = ", p.K, " is not a multiple of 16");
  // x's pairs are 8-byte loads (K even keeps every row's pairs aligned if its start is)
  if (reinterpret_cast<std::uintptr_t>(p.x) % 8 != 0)
    fail(who, ": x is not 8-byte aligned (", static_cast<const void*>(p.x), ")");
  const int parts = lora_mma_parts(p.K);
  if (lora_mma_counters(p.N, p.max_rank, parts) > 0 && p.arrivals == nullptr)
    fail(who, ": K = ", p.K, " comes in ", parts, " parts and no counters were given");
  const int segs = p.n_seg + p.write;
  if (segs < 1) return;
  LoraParams q = p;
  q.seg_chunk = kMmaTiles * kTile;  // the shrink's parallelism is K's parts, not rows
  const int chunks = ceil_div(p.seg_rows > 0 ? imin(p.seg_rows, p.N) : p.N, q.seg_chunk);
  if (p.n_seg > 0) {
    simt::expect_bytes(lora_mma_bytes(q, true));
    simt::launch(simt::kernel<lora_shrink_mma_kernel<kBf16>>,
                 dim3(p.n_seg, ceil_div(p.max_rank, kMmaRanks), chunks * parts), dim3(kThreads), 0,
                 stream, q);
  }
  simt::expect_bytes(lora_mma_bytes(q, false));
  simt::launch(simt::kernel<lora_expand_mma_kernel<kBf16>>,
               dim3(ceil_div(p.Nout, kMmaCols), segs, chunks), dim3(kThreads), 0, stream, q);
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
