// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// out = epilogue(x @ W + b) for a few rows of x (M <= 8, decode) on CUDA cores, W stored (K, N):
// the GEMV mainloop shared by every CUDA-core weight format, with the format as a policy that
// loads 4 adjacent weights of a row of W as fp32 (F32Cols: one 16-byte load; U8Cols: 4 bytes,
// dequantised by group, see linear_u8.hpp) and the epilogue as the template argument.
//
// A warp covers kCols = 32 columns: lane (c, j) owns columns 4c .. 4c + 3 and slice j of the
// current K part (common.hpp's order, kSlices = 4 slices a part), so each row k of W is read as
// 8 lanes x 16 bytes = 128 contiguous bytes, and W is read exactly once by the grid. The slices
// of a part are added in order across the warp by shuffles. A block is 1 to kMaxWarps warps side
// by side over adjacent column tiles, and stages the rows of x its slices read in shared memory
// once for all of them: every warp of a block would otherwise load the same x, and at batch 8
// the 32-column tiles' loads of x add up to as many bytes as a uint8 W. With a SplitK workspace
// the grid has one block per (block of column tiles, part), which for every GPT-2 small linear
// at batch 1 is >= kFillBlocks = 264 blocks, and the last block of its columns adds the parts;
// without one a block walks all the parts. Every lane sums the same products in the same order
// whatever the block's width and the split, so a row's bits do not depend on the launch.
#include <cstdint>

#include "servekit/kernels/common.hpp"

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

namespace gemv {
constexpr int kMaxM = 8;                       // rows of x per launch
constexpr int kVec = 4;                        // columns per lane
constexpr int kColLanes = 8;                   // lanes across a column tile
constexpr int kCols = kVec * kColLanes;        // 32 output columns per warp (a column tile)
constexpr int kSlices = 4;                     // K slices per part, one per group of 8 lanes
constexpr int kThreads = kColLanes * kSlices;  // one warp
static_assert(kThreads == 32);
constexpr int kMaxWarps = 8;    // column tiles a block takes, one a warp
constexpr int kStageRows = 64;  // rows of each slice of x staged at a time
// x's rows of the current kStageRows of each slice, every row m; a row padded by one float, so
// that the four slices' lanes, which read (j, m, t) for j = 0..3 at once, hit four banks.
struct XStage {
  float v[kSlices][kMaxM][kStageRows + 1];
};
}  // namespace gemv

// The CUDA-core order: parts of a multiple of 64 rows (4 slices of a multiple of the tiled
// kernels' k step of 16), one block per 32 columns.
inline KOrder cuda_core_order(int K, int N) {
  return k_order(K, N, gemv::kCols, gemv::kSlices, gemv::kSlices * 16);
}

// fp32 W: 4 adjacent columns in one 16-byte load when every row starts 16-byte aligned.
struct F32Cols {
  const float* w;  // (K, N)
  int N;
  bool vec;  // N % 4 == 0 and w 16-byte aligned
  static constexpr bool kGrouped = false;
  using Raw = float;  // as the tiled kernel stages it
  __device__ SERVEKIT_SIMT_INLINE Raw raw(int k, int n) const {
    return w[static_cast<int64_t>(k) * N + n];
  }
  __device__ SERVEKIT_SIMT_INLINE static float widen(Raw v) { return v; }
  __device__ SERVEKIT_SIMT_INLINE void load(int k, int n, float v[gemv::kVec]) const {
    const float* r = w + static_cast<int64_t>(k) * N + n;
    if (vec) {
      const float4 t = *reinterpret_cast<const float4*>(r);
      v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
    } else {
#pragma unroll
      for (int i = 0; i < gemv::kVec; ++i) v[i] = n + i < N ? r[i] : 0.f;
    }
  }
};

// Group g's (scale, min) for column n; zeros for a column past N, so that folding its (zero)
// sums adds nothing.
struct GroupState {
  float scale, min;
};
// A segment of a uint8 sum ends after row k: its group ends, or its K slice (slice_len rows)
// does.
__device__ SERVEKIT_SIMT_INLINE bool segment_ends(int k, int G, int slice_len) {
  return (k + 1) % G == 0 || (k + 1) % slice_len == 0;
}
// acc + a segment's dequantised sum (scale * sum x q + min * sum x); one expression for every
// uint8 kernel, so they round alike.
__device__ SERVEKIT_SIMT_INLINE float folded(float acc, GroupState st, float part, float xsum) {
  return acc + fmaf(st.scale, part, st.min * xsum);
}

// A register tile of R rows x Cn columns at the end of a uint8 segment: each (row, column)
// segment sum of x q is folded into acc with its column's group state (state_at(column)), and
// the next segment starts from zero. The GEMV and the tiled GEMM both fold through this.
template <int R, int Cn, class StateAt>
__device__ SERVEKIT_SIMT_INLINE void fold_segment(float (&acc)[R][Cn], float (&seg)[R][Cn],
                                                  float (&xsum)[R], StateAt state_at) {
#pragma unroll
  for (int c = 0; c < Cn; ++c) {
    const GroupState st = state_at(c);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      acc[r][c] = folded(acc[r][c], st, seg[r][c], xsum[r]);
      seg[r][c] = 0.f;
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) xsum[r] = 0.f;
}

// Zero-point uint8 W: 4 adjacent codes in one 4-byte load when every row starts 4-byte aligned.
struct U8Cols {
  const std::uint8_t* q;  // (K, N)
  const float* scale;     // (K / group_rows, state_cols)
  const float* zero;      // (K / group_rows, state_cols): each group's min
  int N;
  int group_rows;  // G
  int state_cols;  // N per column, 1 per tensor
  bool vec;        // N % 4 == 0 and q 4-byte aligned
  static constexpr bool kGrouped = true;
  using Raw = std::uint8_t;  // as the tiled kernel stages it
  __device__ SERVEKIT_SIMT_INLINE Raw raw(int k, int n) const {
    return q[static_cast<int64_t>(k) * N + n];
  }
  __device__ SERVEKIT_SIMT_INLINE static float widen(Raw v) { return static_cast<float>(v); }
  __device__ SERVEKIT_SIMT_INLINE void load(int k, int n, float v[gemv::kVec]) const {
    const std::uint8_t* r = q + static_cast<int64_t>(k) * N + n;
    if (vec) {
      const uchar4 t = *reinterpret_cast<const uchar4*>(r);
      v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
    } else {
#pragma unroll
      for (int i = 0; i < gemv::kVec; ++i) v[i] = n + i < N ? static_cast<float>(r[i]) : 0.f;
    }
  }
  __device__ SERVEKIT_SIMT_INLINE GroupState state(int g, int n) const {
    if (n >= N) return {0.f, 0.f};
    const int64_t s = static_cast<int64_t>(g) * state_cols + (state_cols == 1 ? 0 : n);
    return {scale[s], zero[s]};
  }
};

// A CUDA-core linear's arguments, W being one of the loaders above: what the GEMV and the
// tiled GEMM (linear_tiled.hpp) take.
template <class W>
struct CoreParams {
  float* out;      // (M, N)
  const float* x;  // (M, K)
  W w;             // (K, N)
  const float* b;  // (N) or nullptr
  int M, K, N;
  const float* add;  // (M, N) added before the epilogue (a LoRA delta), or nullptr
  KOrder order;      // cuda_core_order(K, N)
  SplitK split;      // one block per (column tile, part) when set (tiled: up to its BM rows)
};

template <Epilogue E, class W>
__global__ void __launch_bounds__(gemv::kThreads* gemv::kMaxWarps, 1)
    linear_gemv_kernel(const CoreParams<W> p) {
  using namespace gemv;
  SERVEKIT_SHARED(XStage, xs);
  const int warps = blockDim.x / kThreads;
  const int lane = threadIdx.x % kThreads, c = lane % kColLanes, j = lane / kColLanes;
  const int n = (blockIdx.x * warps + threadIdx.x / kThreads) * kCols + c * kVec;
  const bool in_range = n < p.N;
  const KOrder o = p.order;
  const int sl = o.slice_len();
  const bool split = p.split.partial != nullptr;
  const int q_begin = split ? blockIdx.y : 0, q_end = split ? blockIdx.y + 1 : o.parts;
  float total[kMaxM][kVec] = {};
  for (int q = q_begin; q < q_end; ++q) {
    // This lane's slice; empty past K (its sums stay zero, which adds nothing).
    const int k_begin = q * o.part_len + j * sl, k_end = imin(p.K, k_begin + sl);
    float acc[kMaxM][kVec] = {};  // the slice's sum (uint8: of its finished segments)
    float seg[kMaxM][kVec] = {};  // uint8: sum x q over the current segment
    float xsum[kMaxM] = {};       // uint8: sum x over the current segment
    for (int t0 = 0; t0 < sl; t0 += kStageRows) {
      __syncthreads();  // every warp is done with the rows staged before
      for (int i = threadIdx.x; i < kSlices * p.M * kStageRows; i += blockDim.x) {
        const int t = i % kStageRows, m = i / kStageRows % p.M, s = i / (kStageRows * p.M);
        const int k = q * o.part_len + s * sl + t0 + t;
        xs.v[s][m][t] = t0 + t < sl && k < p.K ? p.x[static_cast<int64_t>(m) * p.K + k] : 0.f;
      }
      __syncthreads();
      if (!in_range) continue;
      const int kb = k_begin + t0, ke = imin(k_end, kb + kStageRows);
      for (int k = kb; k < ke; ++k) {
        float w[kVec];
        p.w.load(k, n, w);
#pragma unroll
        for (int m = 0; m < kMaxM; ++m) {
          if (m >= p.M) break;
          const float xv = xs.v[j][m][k - kb];
          if constexpr (W::kGrouped) {
            xsum[m] += xv;
#pragma unroll
            for (int i = 0; i < kVec; ++i) seg[m][i] = fmaf(xv, w[i], seg[m][i]);
          } else {
#pragma unroll
            for (int i = 0; i < kVec; ++i) acc[m][i] = fmaf(xv, w[i], acc[m][i]);
          }
        }
        if constexpr (W::kGrouped) {
          if (segment_ends(k, p.w.group_rows, sl)) {
            const int g = k / p.w.group_rows;
            fold_segment(acc, seg, xsum, [&](int i) { return p.w.state(g, n + i); });
          }
        }
      }
    }
    // The part's sum: its slices (lanes c, c + 8, c + 16, c + 24) added in order, from zero.
    // M is the same on every lane, so the whole warp leaves the loop together.
#pragma unroll
    for (int m = 0; m < kMaxM; ++m) {
      if (m >= p.M) break;
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        float part = 0.f;
#pragma unroll
        for (int s = 0; s < kSlices; ++s)
          part += __shfl_sync(simt::kFullMask, acc[m][i], c + s * kColLanes);
        if (split) {
          if (j == 0 && n + i < p.N)
            p.split.partial[(static_cast<int64_t>(q) * p.M + m) * p.N + n + i] = part;
        } else {
          total[m][i] += part;
        }
      }
    }
  }
  if (split) {
    const int cols = warps * kCols;
    split_k_finish<E>(p.split, o.parts, blockIdx.x, 0, p.M, blockIdx.x * cols, cols, p.M, p.N, p.b,
                      p.add, p.out);
    return;
  }
  if (j != 0 || !in_range) return;
#pragma unroll
  for (int m = 0; m < kMaxM; ++m) {
    if (m >= p.M) break;
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      if (n + i < p.N)
        store_epilogue<E>(
            p.out + static_cast<int64_t>(m) * p.N + n + i,
            with_addend(total[m][i] + (p.b ? p.b[n + i] : 0.f), p.add, m, n + i, p.N));
  }
}

// Launches the GEMV (M <= gemv::kMaxM), split over K when `split` has room for it, in blocks
// of as many column tiles (warps) as keep the grid full (tiles_per_block). w_bytes: the
// weight's bytes with its quantisation state, for the launch record.
template <Epilogue E, class W>
void linear_gemv(CoreParams<W> p, std::size_t w_bytes, simt::stream_handle stream) {
  const int tiles = ceil_div(p.N, gemv::kCols);
  const bool split = splits_k(p.split, p.order, p.M, gemv::kMaxM, p.N, tiles);
  if (!split) p.split = {};
  const int parts = split ? p.order.parts : 1;
  const int warps = tiles_per_block(p.M, tiles, parts, gemv::kMaxWarps);
  // Every block reads its columns' W once and x's rows of its K range; a split launch also
  // writes and reads back its parts' sums.
  simt::expect_bytes(linear_bytes(E, p.M, p.K, p.N, w_bytes, p.M, gemv::kCols * warps, p.b, p.add) +
                     split_k_bytes(split, parts, p.M, p.N));
  simt::launch(simt::kernel<linear_gemv_kernel<E, W>>, dim3(ceil_div(tiles, warps), parts),
               dim3(gemv::kThreads * warps), 0, stream, p);
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
