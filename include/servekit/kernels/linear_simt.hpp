// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// out = epilogue(x @ W + b) for fp32 W stored (K, N), on CUDA cores: the launcher. M <= 8
// (decode) runs linear_gemv.hpp's GEMV, more rows linear_tiled.hpp's tiled GEMM; up to 64 rows
// both split over K when the decoder hands them a scratch. Both take the F32Cols loader and sum K
// in cuda_core_order (common.hpp), so a row gets the same bits from either.
#include "servekit/kernels/linear_gemv.hpp"
#include "servekit/kernels/linear_tiled.hpp"

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

struct LinearParams {
  float* out;      // (M, N)
  const float* x;  // (M, K)
  const float* w;  // (K, N)
  const float* b;  // (N) or nullptr
  int M, K, N;
  const float* add = nullptr;  // (M, N) added before the epilogue (a LoRA delta), or nullptr
};

inline void check_linear(const LinearParams& p, const char* who) {
  if (p.M < 1 || p.K < 1 || p.N < 1)
    fail(who, ": cannot run the shape M = ", p.M, ", K = ", p.K, ", N = ", p.N);
  // One grid row per BM rows of x.
  if (ceil_div(p.M, 64) > 65535) fail(who, ": M = ", p.M, " needs more than 65535 row tiles");
}

// The GEMV for M <= 8, the tiled GEMM otherwise (each split over K when `split` has room).
template <Epilogue E>
void linear_simt(const LinearParams& p, simt::stream_handle stream = nullptr,
                 const SplitK& split = {}) {
  check_linear(p, "kernels::linear_simt");
  const std::size_t w = static_cast<std::size_t>(p.K) * p.N * sizeof(float);
  const bool vec = p.N % 4 == 0 && reinterpret_cast<std::uintptr_t>(p.w) % 16 == 0;
  const CoreParams<F32Cols> c{p.out, p.x,   {p.w, p.N, vec},           p.b,  p.M, p.K,
                              p.N,   p.add, cuda_core_order(p.K, p.N), split};
  if (p.M <= gemv::kMaxM)
    linear_gemv<E>(c, w, stream);
  else
    linear_tiled<E>(c, w, stream);
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
