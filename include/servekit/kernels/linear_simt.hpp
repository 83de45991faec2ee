// SPDX-License-Identifier: Apache-2.0
#pragma once
// out = epilogue(x @ W + b) for fp32 W stored (K, N), on CUDA cores. Two shapes:
//  - tiled GEMM (prefill): a (64 x 64) tile of out per block of 256 threads, each thread a
//    (4 x 4) register tile; A and B tiles of BK = 16 staged in shared memory, so each loaded
//    element feeds 4 multiply-adds from registers.
//  - GEMV-shaped (M <= 8, decode): W is read exactly once. Each thread owns one output column
//    and one slice of K; 64 consecutive columns per block make every warp's W read 128
//    contiguous bytes. The K slices are summed in shared memory.
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
  __shared__ __align__(16) SharedStorage s;
  const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  float acc[TM][TN] = {};
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
                          with_addend(acc[i][j] + (p.b ? p.b[n] : 0.f), p.add, m, n, p.N));
    }
  }
}

namespace simt_gemv {
constexpr int kMaxM = 8;    // rows of x per launch
constexpr int kCols = 64;   // output columns per block
constexpr int kSlices = 4;  // K slices per block
constexpr int kThreads = kCols * kSlices;
constexpr int kChunk = 256;  // K values of x staged at a time

struct SharedStorage {
  float x[kMaxM][kChunk];
  float part[kSlices - 1][kMaxM][kCols];  // slices 1.. hand their sums to slice 0
};
}  // namespace simt_gemv

template <Epilogue E>
__global__ void __launch_bounds__(simt_gemv::kThreads) linear_gemv_kernel(const LinearParams p) {
  using namespace simt_gemv;
  __shared__ __align__(16) SharedStorage s;
  const int col = threadIdx.x % kCols, slice = threadIdx.x / kCols;
  const int n = blockIdx.x * kCols + col;
  const bool in_range = n < p.N;
  float acc[kMaxM] = {};
  for (int k0 = 0; k0 < p.K; k0 += kChunk) {
    const int len = imin(kChunk, p.K - k0);
    for (int i = threadIdx.x; i < p.M * kChunk; i += kThreads) {
      const int m = i / kChunk, k = i % kChunk;
      s.x[m][k] = k < len ? p.x[static_cast<int64_t>(m) * p.K + k0 + k] : 0.f;
    }
    __syncthreads();
    if (in_range) {
      for (int k = slice; k < len; k += kSlices) {
        const float w = p.w[static_cast<int64_t>(k0 + k) * p.N + n];
#pragma unroll
        for (int m = 0; m < kMaxM; ++m)
          if (m < p.M) acc[m] = fmaf(s.x[m][k], w, acc[m]);
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
  if (p.M <= simt_gemv::kMaxM) {
    simt::launch(simt::kernel<linear_gemv_kernel<E>>, dim3(ceil_div(p.N, simt_gemv::kCols)),
                 dim3(simt_gemv::kThreads), 0, stream, p);
    return;
  }
  using namespace simt_gemm;
  simt::launch(simt::kernel<linear_simt_kernel<E>>, dim3(ceil_div(p.N, BN), ceil_div(p.M, BM)),
               dim3(kThreads), 0, stream, p);
}

}  // namespace servekit::kernels
