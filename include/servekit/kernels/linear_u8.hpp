// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// out = epilogue(x @ W + b) for zero-point uint8 W stored (K, N) (weights/u8_zero_point.hpp),
// on CUDA cores, with the dequantisation fused: no fp32 copy of W exists anywhere. Inside a
// group of G input rows every weight of column n is q * scale + min, so
//   sum_k x_k w_kn = scale_gn * sum_k x_k q_kn + min_gn * sum_k x_k        (k in group g)
// The k-loop multiplies x by the raw byte widened to fp32 and also sums x; each thread folds
// its two partial sums into its accumulator with the group's (scale, min) when k leaves a
// segment: a group, or the part of one inside a K slice (common.hpp's order). This is the host
// kernel's factorisation (kernels/ref/linear.hpp), so both round the same kinds of quantities.
//  - tiled GEMM (M > 8): linear_tiled.hpp with the U8Cols loader, the W tile staged as bytes
//    (1 KiB instead of 4 KiB of shared memory per stage), split over K up to 64 rows.
//  - GEMV (M <= 8, decode): linear_gemv.hpp with the U8Cols loader, split over K.
// Both fold at the same k and add the same slices and parts in the same order: a row gets the
// same bits from either.
#include <cstdint>

#include "servekit/kernels/common.hpp"
#include "servekit/kernels/linear_gemv.hpp"
#include "servekit/kernels/linear_tiled.hpp"

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

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
  if (ceil_div(p.M, tiled::BM) > 65535)
    fail(who, ": M = ", p.M, " needs more than 65535 row tiles");
}

// The GEMV for M <= 8, the tiled GEMM otherwise (each split over K when `split` has room).
template <Epilogue E>
void linear_u8(const LinearU8Params& p, simt::stream_handle stream = nullptr,
               const SplitK& split = {}) {
  check_linear_u8(p);
  const std::size_t w =
      static_cast<std::size_t>(p.K) * p.N +
      static_cast<std::size_t>(p.K / p.group_rows) * p.state_cols * 2 * sizeof(float);
  const bool vec = p.N % 4 == 0 && reinterpret_cast<std::uintptr_t>(p.q) % 4 == 0;
  const CoreParams<U8Cols> c{
      p.out, p.x,   {p.q, p.scale, p.zero, p.N, p.group_rows, p.state_cols, vec},
      p.b,   p.M,   p.K,
      p.N,   p.add, cuda_core_order(p.K, p.N),
      split};
  if (p.M <= gemv::kMaxM)
    linear_gemv<E>(c, w, stream);
  else
    linear_tiled<E>(c, w, stream);
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
