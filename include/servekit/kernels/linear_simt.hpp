// SPDX-License-Identifier: Apache-2.0
#pragma once
// out = epilogue(x @ W + b) for fp32 W stored (K, N), on CUDA cores. Two shapes:
//  - tiled GEMM (prefill): a (64 x 64) tile of out per block of 256 threads, each thread a
//    (4 x 4) register tile; A and B tiles of BK = 16 staged in shared memory, so each loaded
//    element feeds 4 multiply-adds from registers.
//  - GEMV-shaped (M <= 8, decode): W is read exactly once. Each thread owns one output column
//    and one of the kKSlices contiguous slices of K (common.hpp); 64 consecutive columns per
//    block make every warp's W read 128 contiguous bytes. The slices are summed in shared
//    memory, in order, as the tiled kernel folds them: both give a row the same bits.
#include "servekit/kernels/common.hpp"

namespace servekit::kernels {

struct LinearParams {
  float* out;      // (M, N)
  const float* x;  // (M, K)
  const float* w;  // (K, N)
  const float* b;  // (N) or nullptr
  int M, K, N;
  const float* add = nullptr;  // (M, N) added before the epilogue (a LoRA delta), or nullptr
};

namespace simt_gemm {
constexpr int BM = 64, BN = 64, BK = 16, TM = 4, TN = 4;
constexpr int kThreads = (BM / TM) * (BN / TN);  // 256
static_assert(BM * BK % kThreads == 0 && BK * BN % kThreads == 0);

struct SharedStorage {
  float a[BK][BM + 4];  // x tile, transposed: a thread's TM rows are adjacent
  float b[BK][BN];
};
}  // namespace simt_gemm

template <Epilogue E>
__global__ void __launch_bounds__(simt_gemm::kThreads) linear_simt_kernel(const LinearParams p) {
  using namespace simt_gemm;
  SERVEKIT_SHARED(SharedStorage, s);
  const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  float acc[TM][TN] = {}, total[TM][TN] = {};  // the current K slice's sums; the slices' before
  const int ks = k_slice_len(p.K);
  for (int k0 = 0; k0 < p.K; k0 += BK) {
    // Out-of-range elements are staged as zeros, so the inner loop needs no bounds checks.
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
      s.b[k][c] = gk < p.K && gn < p.N ? p.w[static_cast<int64_t>(gk) * p.N + gn] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = s.a[k][ty * TM + i];
#pragma unroll
      for (int j = 0; j < TN; ++j) b[j] = s.b[k][tx * TN + j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
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

namespace simt_gemv {
constexpr int kMaxM = 8;                   // rows of x per launch
constexpr int kCols = 64;                  // output columns per block
constexpr int kSlices = kKSlices;          // one K slice per thread of a column
constexpr int kThreads = kCols * kSlices;  // 256
constexpr int kChunk = 64;                 // K values of each slice's x staged at a time

struct SharedStorage {
  float x[kSlices][kMaxM][kChunk];
  float part[kSlices - 1][kMaxM][kCols];  // slices 1.. hand their sums to slice 0
};

// x[m][slice * ks + c0 + j] for j < kChunk, zero past the slice or past K.
__device__ SERVEKIT_SIMT_INLINE void stage_x(SharedStorage& s, const float* x, int M, int K, int ks,
                                             int c0) {
  for (int i = threadIdx.x; i < kSlices * M * kChunk; i += kThreads) {
    const int t = i / (M * kChunk), m = i / kChunk % M, j = i % kChunk;
    const int k = t * ks + c0 + j;
    s.x[t][m][j] = c0 + j < ks && k < K ? x[static_cast<int64_t>(m) * K + k] : 0.f;
  }
}
}  // namespace simt_gemv

template <Epilogue E>
__global__ void __launch_bounds__(simt_gemv::kThreads) linear_gemv_kernel(const LinearParams p) {
  using namespace simt_gemv;
  SERVEKIT_SHARED(SharedStorage, s);
  const int col = threadIdx.x % kCols, slice = threadIdx.x / kCols;
  const int n = blockIdx.x * kCols + col;
  const bool in_range = n < p.N;
  const int ks = k_slice_len(p.K), k_begin = slice * ks, k_end = imin(p.K, k_begin + ks);
  float acc[kMaxM] = {};
  for (int c0 = 0; c0 < ks; c0 += kChunk) {
    stage_x(s, p.x, p.M, p.K, ks, c0);
    __syncthreads();
    if (in_range) {
      const int len = imin(kChunk, k_end - k_begin - c0);  // <= 0 past a short last slice
      for (int j = 0; j < len; ++j) {
        const float w = p.w[static_cast<int64_t>(k_begin + c0 + j) * p.N + n];
#pragma unroll
        for (int m = 0; m < kMaxM; ++m)
          if (m < p.M) acc[m] = fmaf(s.x[slice][m][j], w, acc[m]);
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

inline void check_linear(const LinearParams& p, const char* who) {
  if (p.M < 1 || p.K < 1 || p.N < 1)
    fail(who, ": cannot run the shape M = ", p.M, ", K = ", p.K, ", N = ", p.N);
  // One grid row per BM rows of x.
  if (ceil_div(p.M, 64) > 65535) fail(who, ": M = ", p.M, " needs more than 65535 row tiles");
}

// Picks the GEMV shape for M <= 8, the tiled GEMM otherwise.
template <Epilogue E>
void linear_simt(const LinearParams& p, simt::stream_handle stream = nullptr) {
  check_linear(p, "kernels::linear_simt");
  const std::size_t w = static_cast<std::size_t>(p.K) * p.N * sizeof(float);
  if (p.M <= simt_gemv::kMaxM) {
    simt::expect_bytes(linear_bytes(E, p.M, p.K, p.N, w, p.M, simt_gemv::kCols, p.b, p.add));
    simt::launch(simt::kernel<linear_gemv_kernel<E>>, dim3(ceil_div(p.N, simt_gemv::kCols)),
                 dim3(simt_gemv::kThreads), 0, stream, p);
    return;
  }
  using namespace simt_gemm;
  simt::expect_bytes(linear_bytes(E, p.M, p.K, p.N, w, BM, BN, p.b, p.add));
  simt::launch(simt::kernel<linear_simt_kernel<E>>, dim3(ceil_div(p.N, BN), ceil_div(p.M, BM)),
               dim3(kThreads), 0, stream, p);
}

}  // namespace servekit::kernels
