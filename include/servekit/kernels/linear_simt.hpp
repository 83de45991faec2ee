// SPDX-License-Identifier: Apache-2.0
#pragma once
// out = epilogue(x @ W + b) for fp32 W stored (K, N), on CUDA cores. Two shapes:
//  - tiled GEMM (prefill): a (64 x 64) tile of out per block of 256 threads, each thread a
//    (4 x 4) register tile; A and B tiles of BK = 16 staged in shared memory, so each loaded
//    element feeds 4 multiply-adds from registers.
//  - GEMV (M <= 8, decode): linear_gemv.hpp, split over K.
// Both sum K in cuda_core_order (common.hpp): the tiled kernel folds its accumulators where
// the GEMV's slices and parts end, so a row gets the same bits from either.
#include "servekit/kernels/linear_gemv.hpp"

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
__global__ void __launch_bounds__(simt_gemm::kThreads)
    linear_simt_kernel(const LinearParams p, const KOrder o) {
  using namespace simt_gemm;
  SERVEKIT_SHARED(SharedStorage, s);
  const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  // The current slice's sums, the current part's finished slices, the finished parts.
  float acc[TM][TN] = {}, part[TM][TN] = {}, total[TM][TN] = {};
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
    if (o.slice_ends(k0, BK, p.K)) {
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) part[i][j] += acc[i][j], acc[i][j] = 0.f;
    }
    if (o.part_ends(k0, BK, p.K)) {
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) total[i][j] += part[i][j], part[i][j] = 0.f;
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

inline void check_linear(const LinearParams& p, const char* who) {
  if (p.M < 1 || p.K < 1 || p.N < 1)
    fail(who, ": cannot run the shape M = ", p.M, ", K = ", p.K, ", N = ", p.N);
  // One grid row per BM rows of x.
  if (ceil_div(p.M, 64) > 65535) fail(who, ": M = ", p.M, " needs more than 65535 row tiles");
}

// The GEMV for M <= 8 (split over K when `split` has room), the tiled GEMM otherwise.
template <Epilogue E>
void linear_simt(const LinearParams& p, simt::stream_handle stream = nullptr,
                 const SplitK& split = {}) {
  check_linear(p, "kernels::linear_simt");
  const std::size_t w = static_cast<std::size_t>(p.K) * p.N * sizeof(float);
  const KOrder o = cuda_core_order(p.K, p.N);
  if (p.M <= gemv::kMaxM) {
    const bool vec = p.N % 4 == 0 && reinterpret_cast<std::uintptr_t>(p.w) % 16 == 0;
    linear_gemv<E>(
        GemvParams<F32Cols>{p.out, p.x, {p.w, p.N, vec}, p.b, p.M, p.K, p.N, p.add, o, split}, w,
        stream);
    return;
  }
  using namespace simt_gemm;
  simt::expect_bytes(linear_bytes(E, p.M, p.K, p.N, w, BM, BN, p.b, p.add));
  simt::launch(simt::kernel<linear_simt_kernel<E>>, dim3(ceil_div(p.N, BN), ceil_div(p.M, BM)),
               dim3(kThreads), 0, stream, p, o);
}

}  // namespace servekit::kernels
