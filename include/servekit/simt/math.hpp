// SPDX-License-Identifier: Apache-2.0
#pragma once
// CUDA's fast-math and bit intrinsics for the host. On the GPU __expf etc. are approximate; here
// they are the exact libm functions, so a kernel test compares against the GPU with the
// tolerance the reference would need anyway.
#include "servekit/simt/platform.hpp"

#if defined(SERVEKIT_SIMT_HOST)
#include <bit>
#include <cmath>
#include <cstdint>

SERVEKIT_SIMT_INLINE float __expf(float x) {
  return std::exp(x);
}
SERVEKIT_SIMT_INLINE float __exp10f(float x) {
  return std::pow(10.0f, x);
}
SERVEKIT_SIMT_INLINE float __logf(float x) {
  return std::log(x);
}
SERVEKIT_SIMT_INLINE float __log2f(float x) {
  return std::log2(x);
}
SERVEKIT_SIMT_INLINE float __powf(float x, float y) {
  return std::pow(x, y);
}
SERVEKIT_SIMT_INLINE float __sinf(float x) {
  return std::sin(x);
}
SERVEKIT_SIMT_INLINE float __cosf(float x) {
  return std::cos(x);
}
SERVEKIT_SIMT_INLINE float __tanf(float x) {
  return std::tan(x);
}
SERVEKIT_SIMT_INLINE float __tanhf(float x) {
  return std::tanh(x);
}
SERVEKIT_SIMT_INLINE float exp2f_fast(float x) {
  return std::exp2(x);
}
SERVEKIT_SIMT_INLINE float __fdividef(float a, float b) {
  return a / b;
}
SERVEKIT_SIMT_INLINE float __frcp_rn(float x) {
  return 1.0f / x;
}
SERVEKIT_SIMT_INLINE float __fsqrt_rn(float x) {
  return std::sqrt(x);
}
SERVEKIT_SIMT_INLINE float __fmaf_rn(float a, float b, float c) {
  return std::fma(a, b, c);
}
SERVEKIT_SIMT_INLINE float __fadd_rn(float a, float b) {
  return a + b;
}
SERVEKIT_SIMT_INLINE float __fmul_rn(float a, float b) {
  return a * b;
}
SERVEKIT_SIMT_INLINE float __saturatef(float x) {
  return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x);
}
SERVEKIT_SIMT_INLINE float rsqrtf(float x) {
  return 1.0f / std::sqrt(x);
}
SERVEKIT_SIMT_INLINE double rsqrt(double x) {
  return 1.0 / std::sqrt(x);
}

SERVEKIT_SIMT_INLINE int __float_as_int(float x) {
  return std::bit_cast<int>(x);
}
SERVEKIT_SIMT_INLINE unsigned __float_as_uint(float x) {
  return std::bit_cast<unsigned>(x);
}
SERVEKIT_SIMT_INLINE float __int_as_float(int x) {
  return std::bit_cast<float>(x);
}
SERVEKIT_SIMT_INLINE float __uint_as_float(unsigned x) {
  return std::bit_cast<float>(x);
}

SERVEKIT_SIMT_INLINE int __popc(unsigned x) {
  return std::popcount(x);
}
SERVEKIT_SIMT_INLINE int __popcll(unsigned long long x) {
  return std::popcount(x);
}
SERVEKIT_SIMT_INLINE int __clz(int x) {
  return std::countl_zero(static_cast<unsigned>(x));
}
SERVEKIT_SIMT_INLINE int __ffs(int x) {
  return x == 0 ? 0 : std::countr_zero(static_cast<unsigned>(x)) + 1;
}
SERVEKIT_SIMT_INLINE unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
SERVEKIT_SIMT_INLINE unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<std::uint64_t>(a) * b) >> 32);
}
// c + the four products of a's and b's signed bytes (sm_61's dp4a.s32.s32), wrapping as the
// hardware's 32-bit add does.
SERVEKIT_SIMT_INLINE int __dp4a(int a, int b, int c) {
  auto r = static_cast<std::uint32_t>(c);
  for (int i = 0; i < 32; i += 8)
    r += static_cast<std::uint32_t>(static_cast<std::int8_t>(a >> i) *
                                    static_cast<std::int8_t>(b >> i));
  return static_cast<int>(r);
}
#endif
