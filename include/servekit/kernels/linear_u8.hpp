// SPDX-License-Identifier: Apache-2.0
#pragma once
// out = epilogue(x @ W + b) for zero-point uint8 W stored (K, N) (weights/u8_zero_point.hpp),
// on CUDA cores, with the dequantisation fused: no fp32 copy of W exists anywhere. Inside a
// group of G input rows every weight of column n is q * scale + min, so
//   sum_k x_k w_kn = scale_gn * sum_k x_k q_kn + min_gn * sum_k x_k        (k in group g)
// The k-loop multiplies x by the raw byte widened to fp32 and also sums x; each thread folds
// its two partial sums into its accumulator with the group's (scale, min) when k leaves a
// segment: a group, or the part of one inside a K slice (common.hpp's order: slices summed
// from zero, then added in order). This is the host kernel's factorisation
// (kernels/ref/linear.hpp), so both round the same kinds of quantities.
//  - tiled GEMM (prefill): linear_simt's 64x64 tile per 256 threads, 4x4 per thread, BK 16,
//    with the W tile staged as bytes (1 KiB instead of 4 KiB of shared memory per stage).
//  - GEMV-shaped (M <= 8, decode): one column and one contiguous K slice per thread, as
//    linear_simt's GEMV; each W byte is read exactly once.
// Both fold at the same k and add the same slices in the same order: a row gets the same bits
// from either.
#include <cstdint>

#include "servekit/kernels/common.hpp"
#include "servekit/kernels/linear_simt.hpp"  // simt_gemv's x staging

namespace servekit::kernels {

struct LinearU8Params {
  float* out;             // (M, N)
  const float* x;         // (M, K)
  const std::uint8_t* q;  // (K, N)
  const float* scale;     // (K / group_rows, state_cols)
  const float* zero;      // (K / group_rows, state_cols): each group's min
  const float* b;         // (N) or nullptr
  int M, K, N;
  int group_rows;  // G: input rows sharing one (scale, min); K per tensor and per channel
  int state_cols;  // N when each column has its own (scale, min), 1 per tensor
  const float* add = nullptr;  // (M, N) added before the epilogue (a LoRA delta), or nullptr
};

// Group g's (scale, min) for column n; zeros for a column past N, so that folding its (zero)
// sums adds nothing.
struct GroupState {
  float scale, min;
};
__device__ SERVEKIT_SIMT_INLINE GroupState group_state(const LinearU8Params& p, int g, int n) {
  if (n >= p.N) return {0.f, 0.f};
  const int64_t s = static_cast<int64_t>(g) * p.state_cols + (p.state_cols == 1 ? 0 : n);
  return {p.scale[s], p.zero[s]};
}
// A segment ends after row k: its group ends, or its K slice (ks rows) does.
__device__ SERVEKIT_SIMT_INLINE bool segment_ends(int k, int G, int ks) {
  return (k + 1) % G == 0 || (k + 1) % ks == 0;
}
// acc + the segment's dequantised sum; one expression for both kernels.
__device__ SERVEKIT_SIMT_INLINE float folded(float acc, GroupState st, float part, float xsum) {
  return acc + fmaf(st.scale, part, st.min * xsum);
}

namespace u8_gemm {
constexpr int BM = 64, BN = 64, BK = 16, TM = 4, TN = 4;
constexpr int kThreads = (BM / TM) * (BN / TN);  // 256
static_assert(BM * BK % kThreads == 0 && BK * BN % kThreads == 0);

struct SharedStorage {
  float a[BK][BM + 4];     // x tile, transposed: a thread's TM rows are adjacent
  std::uint8_t b[BK][BN];  // W tile, raw bytes
};
}  // namespace u8_gemm

template <Epilogue E>
__global__ void __launch_bounds__(u8_gemm::kThreads) linear_u8_kernel(const LinearU8Params p) {
  using namespace u8_gemm;
  SERVEKIT_SHARED(SharedStorage, s);
  const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  float total[TM][TN] = {};  // dequantised sums of finished K slices
  float acc[TM][TN] = {};    // ... of the current slice's finished segments
  float part[TM][TN] = {};   // sum_k x q over the current segment
  float xsum[TM] = {};       // sum_k x over the current segment
  const int ks = k_slice_len(p.K);
  for (int k0 = 0; k0 < p.K; k0 += BK) {
    // Out-of-range elements are staged as zeros: they add nothing to either sum.
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
      s.b[k][c] = gk < p.K && gn < p.N ? p.q[static_cast<int64_t>(gk) * p.N + gn] : 0;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = s.a[k][ty * TM + i];
#pragma unroll
      for (int j = 0; j < TN; ++j) b[j] = static_cast<float>(s.b[k][tx * TN + j]);
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        xsum[i] += a[i];
#pragma unroll
        for (int j = 0; j < TN; ++j) part[i][j] = fmaf(a[i], b[j], part[i][j]);
      }
      // The same k for the whole block: a uniform branch. G divides K, so the last group
      // ends at k = K - 1; the zero rows staged past K end no segment.
      const int gk = k0 + k;
      if (gk < p.K && segment_ends(gk, p.group_rows, ks)) {
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          const GroupState st = group_state(p, gk / p.group_rows, n0 + tx * TN + j);
#pragma unroll
          for (int i = 0; i < TM; ++i) {
            acc[i][j] = folded(acc[i][j], st, part[i][j], xsum[i]);
            part[i][j] = 0.f;
          }
        }
#pragma unroll
        for (int i = 0; i < TM; ++i) xsum[i] = 0.f;
      }
    }
    __syncthreads();
    if ((k0 + BK) % ks == 0 || k0 + BK >= p.K) {  // a K slice ends with this tile
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) total[i][j] += acc[i][j], acc[i][j] = 0.f;
    }
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int m = m0 + ty * TM + i;
    if (m >= p.M) break;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int n = n0 + tx * TN + j;
      if (n < p.N)
        store_epilogue<E>(p.out + static_cast<int64_t>(m) * p.N + n,
                          with_addend(total[i][j] + (p.b ? p.b[n] : 0.f), p.add, m, n, p.N));
    }
  }
}

// Thread (column, slice) walks its contiguous K slice, folding at every segment end.
template <Epilogue E>
__global__ void __launch_bounds__(simt_gemv::kThreads)
    linear_u8_gemv_kernel(const LinearU8Params p) {
  using namespace simt_gemv;
  SERVEKIT_SHARED(SharedStorage, s);
  const int col = threadIdx.x % kCols, slice = threadIdx.x / kCols;
  const int n = blockIdx.x * kCols + col;
  const bool in_range = n < p.N;
  const int ks = k_slice_len(p.K), k_begin = slice * ks, k_end = imin(p.K, k_begin + ks);
  float acc[kMaxM] = {}, part[kMaxM] = {}, xsum[kMaxM] = {};
  for (int c0 = 0; c0 < ks; c0 += kChunk) {
    stage_x(s, p.x, p.M, p.K, ks, c0);
    __syncthreads();
    if (in_range) {
      const int len = imin(kChunk, k_end - k_begin - c0);  // <= 0 past a short last slice
      for (int j = 0; j < len; ++j) {
        const int k = k_begin + c0 + j;
        const float w = static_cast<float>(p.q[static_cast<int64_t>(k) * p.N + n]);
#pragma unroll
        for (int m = 0; m < kMaxM; ++m)
          if (m < p.M) {
            part[m] = fmaf(s.x[slice][m][j], w, part[m]);
            xsum[m] += s.x[slice][m][j];
          }
        if (segment_ends(k, p.group_rows, ks)) {
          const GroupState st = group_state(p, k / p.group_rows, n);
#pragma unroll
          for (int m = 0; m < kMaxM; ++m) {
            acc[m] = folded(acc[m], st, part[m], xsum[m]);
            part[m] = xsum[m] = 0.f;
          }
        }
      }
    }
    __syncthreads();
  }
  if (slice > 0)
#pragma unroll
    for (int m = 0; m < kMaxM; ++m) s.part[slice - 1][m][col] = acc[m];
  __syncthreads();
  if (slice > 0 || !in_range) return;
#pragma unroll
  for (int m = 0; m < kMaxM; ++m) {
    if (m >= p.M) break;
    float v = acc[m];
#pragma unroll
    for (int j = 0; j < kSlices - 1; ++j) v += s.part[j][m][col];
    store_epilogue<E>(p.out + static_cast<int64_t>(m) * p.N + n,
                      with_addend(v + (p.b ? p.b[n] : 0.f), p.add, m, n, p.N));
  }
}

// What the kernels can run: a positive shape, a group size dividing K (every group whole, so
// the tiled kernel's last group ends inside its last k tile), one (scale, min) per tensor or
// per column.
inline void check_linear_u8(const LinearU8Params& p) {
  constexpr const char* who = "kernels::linear_u8";
  if (p.M < 1 || p.K < 1 || p.N < 1)
    fail(who, ": cannot run the shape M = ", p.M, ", K = ", p.K, ", N = ", p.N);
  if (p.group_rows < 1 || p.K % p.group_rows != 0)
    fail(who, ": group size G = ", p.group_rows, " does not divide K = ", p.K,
         " (the input rows of the (K, N) = (", p.K, ", ", p.N, ") matrix)");
  if (p.state_cols != 1 && p.state_cols != p.N)
    fail(who, ": ", p.state_cols, " (scale, min) columns for N = ", p.N,
         " output columns: need 1 (per tensor) or N (per column)");
  if (ceil_div(p.M, u8_gemm::BM) > 65535)
    fail(who, ": M = ", p.M, " needs more than 65535 row tiles");
}

// Picks the GEMV shape for M <= 8, the tiled GEMM otherwise.
template <Epilogue E>
void linear_u8(const LinearU8Params& p, simt::stream_handle stream = nullptr) {
  check_linear_u8(p);
  const std::size_t w =
      static_cast<std::size_t>(p.K) * p.N +
      static_cast<std::size_t>(p.K / p.group_rows) * p.state_cols * 2 * sizeof(float);
  if (p.M <= simt_gemv::kMaxM) {
    simt::expect_bytes(linear_bytes(E, p.M, p.K, p.N, w, p.M, simt_gemv::kCols, p.b, p.add));
    simt::launch(simt::kernel<linear_u8_gemv_kernel<E>>, dim3(ceil_div(p.N, simt_gemv::kCols)),
                 dim3(simt_gemv::kThreads), 0, stream, p);
    return;
  }
  using namespace u8_gemm;
  simt::expect_bytes(linear_bytes(E, p.M, p.K, p.N, w, BM, BN, p.b, p.add));
  simt::launch(simt::kernel<linear_u8_kernel<E>>, dim3(ceil_div(p.N, BN), ceil_div(p.M, BM)),
               dim3(kThreads), 0, stream, p);
}

}  // namespace servekit::kernels
