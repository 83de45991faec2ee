// SPDX-License-Identifier: Apache-2.0
#pragma once
// out = epilogue(x @ W + b) for zero-point uint8 W stored (K, N) (weights/u8_zero_point.hpp),
// on CUDA cores, with the dequantisation fused: no fp32 copy of W exists anywhere. Inside a
// group of G input rows every weight of column n is q * scale + min, so
//   sum_k x_k w_kn = scale_gn * sum_k x_k q_kn + min_gn * sum_k x_k        (k in group g)
// The k-loop multiplies x by the raw byte widened to fp32 and also sums x; each thread folds
// its two partial sums into its accumulator with the group's (scale, min) when k leaves a
// segment: a group, or the part of one inside a K slice (common.hpp's order). This is the host
// kernel's factorisation (kernels/ref/linear.hpp), so both round the same kinds of quantities.
//  - tiled GEMM (prefill): linear_simt's 64x64 tile per 256 threads, 4x4 per thread, BK 16,
//    with the W tile staged as bytes (1 KiB instead of 4 KiB of shared memory per stage).
//  - GEMV (M <= 8, decode): linear_gemv.hpp with the U8Cols loader, split over K.
// Both fold at the same k and add the same slices and parts in the same order: a row gets the
// same bits from either.
#include <cstdint>

#include "servekit/kernels/common.hpp"
#include "servekit/kernels/linear_gemv.hpp"

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

__device__ SERVEKIT_SIMT_INLINE GroupState group_state(const LinearU8Params& p, int g, int n) {
  return U8Cols{p.q, p.scale, p.zero, p.N, p.group_rows, p.state_cols, false}.state(g, n);
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
__global__ void __launch_bounds__(u8_gemm::kThreads)
    linear_u8_kernel(const LinearU8Params p, const KOrder o) {
  using namespace u8_gemm;
  SERVEKIT_SHARED(SharedStorage, s);
  const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  float total[TM][TN] = {};  // dequantised sums of finished K parts
  float sum[TM][TN] = {};    // ... of the current part's finished slices
  float acc[TM][TN] = {};    // ... of the current slice's finished segments
  float part[TM][TN] = {};   // sum_k x q over the current segment
  float xsum[TM] = {};       // sum_k x over the current segment
  const int ks = o.slice_len();
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
      if (n < p.N)
        store_epilogue<E>(p.out + static_cast<int64_t>(m) * p.N + n,
                          with_addend(total[i][j] + (p.b ? p.b[n] : 0.f), p.add, m, n, p.N));
    }
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

// The GEMV for M <= 8 (split over K when `split` has room), the tiled GEMM otherwise.
template <Epilogue E>
void linear_u8(const LinearU8Params& p, simt::stream_handle stream = nullptr,
               const SplitK& split = {}) {
  check_linear_u8(p);
  const std::size_t w =
      static_cast<std::size_t>(p.K) * p.N +
      static_cast<std::size_t>(p.K / p.group_rows) * p.state_cols * 2 * sizeof(float);
  const KOrder o = cuda_core_order(p.K, p.N);
  if (p.M <= gemv::kMaxM) {
    const bool vec = p.N % 4 == 0 && reinterpret_cast<std::uintptr_t>(p.q) % 4 == 0;
    linear_gemv<E>(GemvParams<U8Cols>{p.out,
                                      p.x,
                                      {p.q, p.scale, p.zero, p.N, p.group_rows, p.state_cols, vec},
                                      p.b,
                                      p.M,
                                      p.K,
                                      p.N,
                                      p.add,
                                      o,
                                      split},
                   w, stream);
    return;
  }
  using namespace u8_gemm;
  simt::expect_bytes(linear_bytes(E, p.M, p.K, p.N, w, BM, BN, p.b, p.add));
  simt::launch(simt::kernel<linear_u8_kernel<E>>, dim3(ceil_div(p.N, BN), ceil_div(p.M, BM)),
               dim3(kThreads), 0, stream, p, o);
}

}  // namespace servekit::kernels
