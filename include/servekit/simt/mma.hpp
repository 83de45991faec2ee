// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// Tensor-core fragments: mma.sync m16n8k16 (f16 or bf16 inputs, f32 accumulate), m16n8k32
// (int8 inputs, int32 accumulate) and ldmatrix.
// Under nvcc, inline PTX. On the host, a warp-level exchange: the last lane to arrive gathers
// every lane's fragment into whole tiles, multiplies, and scatters the result back, using the
// fragment layouts of the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point
// type", and "... for mma.m16n8k32" with .s8 elements). The same layouts are CuTe's
// SM80_16x8x16_F32F16F16F32_TN and SM80_16x8x32_S32S8S8S32_TN traits, which
// tests/test_simt_mma.cpp checks independently.
#include "servekit/simt/platform.hpp"

#include <cstdint>

#if defined(SERVEKIT_SIMT_HOST)
#include <cmath>
#include <cstring>
#include <sstream>

#include "servekit/simt/warp.hpp"
#endif

namespace servekit::simt {
inline namespace SERVEKIT_DEVICE_ABI {

// Where fragment element i of lane `lane` sits in its tile. groupID = lane / 4 picks the row (A,
// C) or column (B); threadID_in_group = lane % 4 picks a pair of adjacent columns (A, C) or rows
// (B). Element i lives in register i / 2, in the low 16 bits when i is even.
namespace mma_layout {
// A: (16 x 16) row-major, 8 elements per lane (4 registers).
__host__ __device__ constexpr int a_row(int lane, int i) {
  return (lane >> 2) + 8 * ((i >> 1) & 1);
}
__host__ __device__ constexpr int a_col(int lane, int i) {
  return (lane & 3) * 2 + (i & 1) + 8 * (i >> 2);
}
// B: (16 x 8) as (k, n), 4 elements per lane (2 registers).
__host__ __device__ constexpr int b_row(int lane, int i) {
  return (lane & 3) * 2 + (i & 1) + 8 * (i >> 1);
}
__host__ __device__ constexpr int b_col(int lane, int) {
  return lane >> 2;
}
// C and D: (16 x 8), 4 floats per lane.
__host__ __device__ constexpr int c_row(int lane, int i) {
  return (lane >> 2) + 8 * (i >> 1);
}
__host__ __device__ constexpr int c_col(int lane, int i) {
  return (lane & 3) * 2 + (i & 1);
}

// m16n8k32 with 8-bit elements: element i in register i / 4, byte i % 4; a lane's 4 bytes of a
// register are 4 consecutive k. A: (16 x 32) row-major, 16 elements per lane (4 registers).
__host__ __device__ constexpr int a8_row(int lane, int i) {
  return (lane >> 2) + 8 * ((i >> 2) & 1);
}
__host__ __device__ constexpr int a8_col(int lane, int i) {
  return (lane & 3) * 4 + (i & 3) + 16 * (i >> 3);
}
// B: (32 x 8) as (k, n), 8 elements per lane (2 registers). C and D: int32, as c_row / c_col.
__host__ __device__ constexpr int b8_row(int lane, int i) {
  return (lane & 3) * 4 + (i & 3) + 16 * (i >> 2);
}
__host__ __device__ constexpr int b8_col(int lane, int) {
  return lane >> 2;
}
}  // namespace mma_layout

#if defined(SERVEKIT_SIMT_HOST)
namespace detail {

SERVEKIT_SIMT_INLINE float b16_to_float(std::uint16_t bits, bool is_bf16) {
  if (is_bf16) return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
  __half_raw r;
  r.x = bits;
  return __half2float(__half(r));
}

struct MmaIn {
  const std::uint32_t* a;  // (4)
  const std::uint32_t* b;  // (2)
  const float* c;          // (4)
};

template <bool kBf16>
void exchange_mma(unsigned lanes, const LaneSlot* s) {
  if (lanes != kFullMask) throw Error("mma.sync m16n8k16 needs all 32 lanes of the warp");
  float a[16][16], b[16][8], c[16][8];  // (M, K), (K, N), (M, N)
  for (int l = 0; l < kWarpSize; ++l) {
    const auto* in = static_cast<const MmaIn*>(s[l].in);
    for (int i = 0; i < 8; ++i)
      a[mma_layout::a_row(l, i)][mma_layout::a_col(l, i)] =
          b16_to_float(static_cast<std::uint16_t>(in->a[i / 2] >> (16 * (i & 1))), kBf16);
    for (int i = 0; i < 4; ++i)
      b[mma_layout::b_row(l, i)][mma_layout::b_col(l, i)] =
          b16_to_float(static_cast<std::uint16_t>(in->b[i / 2] >> (16 * (i & 1))), kBf16);
    for (int i = 0; i < 4; ++i) c[mma_layout::c_row(l, i)][mma_layout::c_col(l, i)] = in->c[i];
  }
  // Products of 16-bit floats are exact in fp32; the sums round in fp32, k in order.
  float d[16][8];
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      float acc = c[m][n];
      for (int k = 0; k < 16; ++k) acc = std::fma(a[m][k], b[k][n], acc);
      d[m][n] = acc;
    }
  for (int l = 0; l < kWarpSize; ++l) {
    auto* out = static_cast<float*>(s[l].out);
    for (int i = 0; i < 4; ++i) out[i] = d[mma_layout::c_row(l, i)][mma_layout::c_col(l, i)];
  }
}

struct MmaS8In {
  const std::uint32_t* a;  // (4)
  const std::uint32_t* b;  // (2)
  const std::int32_t* c;   // (4)
};

// Integer products and sums are exact; the 32-bit adds wrap, as the instruction without
// .satfinite does.
inline void exchange_mma_s8(unsigned lanes, const LaneSlot* s) {
  if (lanes != kFullMask) throw Error("mma.sync m16n8k32 needs all 32 lanes of the warp");
  std::int32_t a[16][32], b[32][8];
  std::uint32_t d[16][8];
  for (int l = 0; l < kWarpSize; ++l) {
    const auto* in = static_cast<const MmaS8In*>(s[l].in);
    for (int i = 0; i < 16; ++i)
      a[mma_layout::a8_row(l, i)][mma_layout::a8_col(l, i)] =
          static_cast<std::int8_t>(in->a[i / 4] >> (8 * (i & 3)));
    for (int i = 0; i < 8; ++i)
      b[mma_layout::b8_row(l, i)][mma_layout::b8_col(l, i)] =
          static_cast<std::int8_t>(in->b[i / 4] >> (8 * (i & 3)));
    for (int i = 0; i < 4; ++i)
      d[mma_layout::c_row(l, i)][mma_layout::c_col(l, i)] = static_cast<std::uint32_t>(in->c[i]);
  }
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n)
      for (int k = 0; k < 32; ++k) d[m][n] += static_cast<std::uint32_t>(a[m][k] * b[k][n]);
  for (int l = 0; l < kWarpSize; ++l) {
    auto* out = static_cast<std::int32_t*>(s[l].out);
    for (int i = 0; i < 4; ++i)
      out[i] = static_cast<std::int32_t>(d[mma_layout::c_row(l, i)][mma_layout::c_col(l, i)]);
  }
}

// ldmatrix .m8n8 .x{kCount} [.trans] .b16: lanes 8j..8j+7 give the row addresses of matrix j.
template <int kCount, bool kTrans>
void exchange_ldmatrix(unsigned lanes, const LaneSlot* s) {
  if (lanes != kFullMask) throw Error("ldmatrix needs all 32 lanes of the warp");
  auto elem = [&](int matrix, int row, int col) {
    std::uint16_t v;
    std::memcpy(&v,
                static_cast<const char*>(*static_cast<const void* const*>(s[matrix * 8 + row].in)) +
                    2 * col,
                2);
    return static_cast<std::uint32_t>(v);
  };
  for (int l = 0; l < kWarpSize; ++l) {
    auto* out = static_cast<std::uint32_t*>(s[l].out);
    for (int j = 0; j < kCount; ++j) {
      const int r = l >> 2, c = (l & 3) * 2;
      out[j] = kTrans ? elem(j, c, r) | elem(j, c + 1, r) << 16
                      : elem(j, r, c) | elem(j, r, c + 1) << 16;
    }
  }
}

// Lanes 0 .. 8 kCount - 1 give row addresses, which PTX requires 16-byte aligned (a GPU faults
// with a misaligned address); the other lanes' addresses are not read.
template <int kCount, bool kTrans>
SERVEKIT_SIMT_INLINE void ldmatrix(std::uint32_t* r, const void* row_ptr, const char* op) {
  const int me = g_worker->current, lane = me & (kWarpSize - 1);
  if (lane < 8 * kCount && reinterpret_cast<std::uintptr_t>(row_ptr) % 16 != 0) {
    std::ostringstream os;
    os << op << ": thread " << me << " (lane " << lane << ", row " << lane % 8 << " of matrix "
       << lane / 8 << ") gives row address " << row_ptr
       << ", which is not 16-byte aligned as ldmatrix requires";
    throw Error(os.str());
  }
  warp_exchange(kFullMask, op, &exchange_ldmatrix<kCount, kTrans>, &row_ptr, r);
}

}  // namespace detail
#endif

// d = a * b + c on a 16x8x16 tile held by the warp: a (4 regs, 8 halves), b (2 regs, 4
// halves), c and d (4 floats) per lane, in the layouts of mma_layout.
__device__ SERVEKIT_SIMT_INLINE void mma_m16n8k16_f16f32(float d[4], const std::uint32_t a[4],
                                                         const std::uint32_t b[2],
                                                         const float c[4]) {
#if defined(SERVEKIT_SIMT_DEVICE)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
#else
  const detail::MmaIn in{a, b, c};
  float out[4];
  detail::warp_exchange(kFullMask, "mma_m16n8k16_f16f32", &detail::exchange_mma<false>, &in, out);
  for (int i = 0; i < 4; ++i) d[i] = out[i];
#endif
}

// The same with bf16 inputs.
__device__ SERVEKIT_SIMT_INLINE void mma_m16n8k16_bf16f32(float d[4], const std::uint32_t a[4],
                                                          const std::uint32_t b[2],
                                                          const float c[4]) {
#if defined(SERVEKIT_SIMT_DEVICE)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
#else
  const detail::MmaIn in{a, b, c};
  float out[4];
  detail::warp_exchange(kFullMask, "mma_m16n8k16_bf16f32", &detail::exchange_mma<true>, &in, out);
  for (int i = 0; i < 4; ++i) d[i] = out[i];
#endif
}

// d = a * b + c on a 16x8x32 tile of int8 inputs: a (4 regs, 16 bytes), b (2 regs, 8 bytes), c
// and d (4 int32) per lane, in mma_layout's a8 / b8 / c layouts.
__device__ SERVEKIT_SIMT_INLINE void mma_m16n8k32_s8s32(std::int32_t d[4], const std::uint32_t a[4],
                                                        const std::uint32_t b[2],
                                                        const std::int32_t c[4]) {
#if defined(SERVEKIT_SIMT_DEVICE)
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%11,%12,%13};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]),
        "r"(c[2]), "r"(c[3]));
#else
  const detail::MmaS8In in{a, b, c};
  std::int32_t out[4];
  detail::warp_exchange(kFullMask, "mma_m16n8k32_s8s32", &detail::exchange_mma_s8, &in, out);
  for (int i = 0; i < 4; ++i) d[i] = out[i];
#endif
}

// ldmatrix: lane l passes the address of one 16-byte row in shared memory: rows 0-7 of matrix
// 0 from lanes 0-7, matrix 1 from lanes 8-15, ... Lane l receives, per matrix j, register r[j]
// = elements (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1); with _trans the transposed pair.
__device__ SERVEKIT_SIMT_INLINE void ldmatrix_x4(std::uint32_t r[4], const void* smem_row_ptr) {
#if defined(SERVEKIT_SIMT_DEVICE)
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_row_ptr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#else
  detail::ldmatrix<4, false>(r, smem_row_ptr, "ldmatrix_x4");
#endif
}
__device__ SERVEKIT_SIMT_INLINE void ldmatrix_x2(std::uint32_t r[2], const void* smem_row_ptr) {
#if defined(SERVEKIT_SIMT_DEVICE)
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_row_ptr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
#else
  detail::ldmatrix<2, false>(r, smem_row_ptr, "ldmatrix_x2");
#endif
}
__device__ SERVEKIT_SIMT_INLINE void ldmatrix_x4_trans(std::uint32_t r[4],
                                                       const void* smem_row_ptr) {
#if defined(SERVEKIT_SIMT_DEVICE)
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_row_ptr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#else
  detail::ldmatrix<4, true>(r, smem_row_ptr, "ldmatrix_x4_trans");
#endif
}
__device__ SERVEKIT_SIMT_INLINE void ldmatrix_x2_trans(std::uint32_t r[2],
                                                       const void* smem_row_ptr) {
#if defined(SERVEKIT_SIMT_DEVICE)
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_row_ptr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
#else
  detail::ldmatrix<2, true>(r, smem_row_ptr, "ldmatrix_x2_trans");
#endif
}

// Two 16-bit values in one register, `lo` in the low half (the fragments' element order).
__host__ __device__ SERVEKIT_SIMT_INLINE std::uint32_t pack_b16(std::uint16_t lo,
                                                                std::uint16_t hi) {
  return static_cast<std::uint32_t>(lo) | static_cast<std::uint32_t>(hi) << 16;
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::simt
