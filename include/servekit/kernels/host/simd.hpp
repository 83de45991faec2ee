// SPDX-License-Identifier: Apache-2.0
#pragma once
// The host kernels' vector: a GCC vector of kLanes floats as wide as the target's registers
// (-march decides: AVX-512 zmm, AVX ymm, else SSE xmm), and loads that
// widen each weight format to it. Register tiles are sized from the register file here, at
// compile time, so one kernel source is right on AVX2 machines (16 registers) and on AVX-512
// ones (32).
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "servekit/core/dtype.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace servekit::kernels::host {

// kIsa names the vector ISA the host kernels were compiled for, as benchmarks report it.
#if defined(__AVX512F__)
constexpr int kLanes = 16;
constexpr int kRegisters = 32;
constexpr const char* kIsa = "AVX512";
#elif defined(__AVX__)
constexpr int kLanes = 8;
constexpr int kRegisters = 16;
#if defined(__AVX2__)
constexpr const char* kIsa = "AVX2";
#else
constexpr const char* kIsa = "AVX";
#endif
#else  // SSE: a wider GCC vector would be passed in memory (and GCC warns -Wpsabi)
constexpr int kLanes = 4;
constexpr int kRegisters = 16;
constexpr const char* kIsa = "SSE";
#endif
using vec = float __attribute__((vector_size(kLanes * sizeof(float))));

// Keeps a host-only helper inline, in a host compile and in nvcc's host pass of a .cu alike.
#define SERVEKIT_HOST_INLINE inline __attribute__((always_inline))

// Asks for p's line, into the levels __builtin_prefetch's Locality names (3, prefetcht0: every
// level; 1, prefetcht2: L2 on the cores measured here, not L1). The empty volatile asm is an effect
// of its own: GCC finds a function whose only effects are prefetches and its own locals pure, and
// drops its calls (the LoRA expand's asks for B^T ahead, host/lora.hpp, measured no prefetch at all
// until this).
template <int Locality>
SERVEKIT_HOST_INLINE void prefetch_kept(const void* p) {
  __builtin_prefetch(p, 0, Locality);
  asm volatile("");
}

// Pins v to a register at this point: GCC folds a vector loaded once and used by several FMAs
// into each FMA as a memory operand, one load per use, which makes a loop bound by its loads
// (the LoRA shrink's: 10 loads for 8 FMAs, host/lora.hpp).
SERVEKIT_HOST_INLINE void in_register(vec& v) {
#if defined(__AVX__)
  asm("" : "+v"(v));
#else
  (void)v;
#endif
}

// The register tile of the matmul micro-kernel: kMR rows of x times kNR columns of W, held in
// kMR * kNR / kLanes accumulators, leaving registers for the W vectors and the broadcast x.
// AVX-512: 8 x 32 (16 of 32 zmm); AVX2: 6 x 16 (12 of 16 ymm, the classic 6 x 16 shape).
constexpr int kNR = 2 * kLanes;
constexpr int kMR = kRegisters == 32 ? 8 : 6;

inline vec load(const float* p) {
  vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline vec broadcast(const float* p) {  // vbroadcastss from memory: a load, no shuffle
#if defined(__AVX512F__)
  return vec(_mm512_set1_ps(*p));
#elif defined(__AVX__)
  return vec(_mm256_broadcast_ss(p));
#else
  return vec{} + *p;
#endif
}
inline void store(float* p, vec v) {
  std::memcpy(p, &v, sizeof v);
}

// The lanes of v added as a tree (halves, then quarters, ...): log2(kLanes) dependent adds
// where a lane-order sum has kLanes - 1. One fixed order per target.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
inline float lane_sum(vec v) {
#if defined(__AVX512F__)
  const __m512 z = __m512(v);
  // GCC 12's AVX-512 intrinsics start from an undefined value that it then reports as
  // uninitialised (bug 105593): the pragmas around this function.
  __m256 h = _mm512_castps512_ps256(_mm512_add_ps(z, _mm512_shuffle_f32x4(z, z, 0xee)));
#elif defined(__AVX__)
  __m256 h = __m256(v);
#endif
#if defined(__AVX__)
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
#elif defined(__SSE__)
  __m128 s = __m128(v);
#endif
#if defined(__SSE__)
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
#else
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int i = 0; i < w; i++) v[i] += v[i + w];
  return v[0];
#endif
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// a * b + c, fused wherever the target has FMA, in the vector and the scalar code alike: a
// column summed by a vector in one call and by the scalar edge loop in another must round the
// same (the kernels' batch invariance), whatever the compiler's -ffp-contract.
inline vec madd(vec a, vec b, vec c) {
#if defined(__AVX512F__)
  return vec(_mm512_fmadd_ps(__m512(a), __m512(b), __m512(c)));
#elif defined(__FMA__)
  return vec(_mm256_fmadd_ps(__m256(a), __m256(b), __m256(c)));
#else
  return a * b + c;
#endif
}
inline float madd(float a, float b, float c) {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// half -> float without branches (for targets without F16C). Exact for every half; the tests
// compare all 65536 with core's half_to_float.
inline float widen_half(half_t h) {
  const uint32_t sign = uint32_t(h.bits & 0x8000u) << 16;
  const uint32_t em = uint32_t(h.bits & 0x7fffu) << 13;  // exponent and mantissa, fp32 place
  const uint32_t exp = em & 0x0f800000u;
  const uint32_t normal = em + (112u << 23);  // rebias 15 -> 127
  const uint32_t infnan = em + (224u << 23);  // exponent 31 -> 255
  // Denormal or zero: 2^-14 (1 + m / 1024) - 2^-14 = m 2^-24, exactly.
  const float den = std::bit_cast<float>(em + (113u << 23)) - std::bit_cast<float>(113u << 23);
  uint32_t r = exp == 0x0f800000u ? infnan : normal;
  r = exp == 0 ? std::bit_cast<uint32_t>(den) : r;
  return std::bit_cast<float>(r | sign);
}
inline float widen(float x) {
  return x;
}
inline float widen(half_t h) {
  return widen_half(h);
}
inline float widen(bf16_t h) {
  return bf16_to_float(h);
}
inline float widen(uint8_t q) {  // a raw zero-point code; scale and min are applied per group
  return static_cast<float>(q);
}
inline float widen(int8_t q) {  // an int8 cache's code; its row's scale is applied per head
  return static_cast<float>(q);
}

// GCC 12's AVX-512 conversion intrinsics start from _mm512_undefined_*, which it then reports
// as uninitialised or maybe so (GCC bug 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// kLanes consecutive weights widened to fp32: one instruction where the ISA has it (F16C's
// vcvtph2ps, a zero-extend and shift for bf16, vpmovzxbd + vcvtdq2ps for bytes).
inline vec load(const half_t* p) {
#if defined(__AVX512F__)
  return vec(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
#elif defined(__F16C__)
  return vec(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#else
  vec v;
  for (int i = 0; i < kLanes; i++) v[i] = widen_half(p[i]);
  return v;
#endif
}
inline vec load(const bf16_t* p) {
#if defined(__AVX512F__)
  const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return vec(_mm512_castsi512_ps(_mm512_slli_epi32(u, 16)));
#elif defined(__AVX2__)
  const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return vec(_mm256_castsi256_ps(_mm256_slli_epi32(u, 16)));
#else
  vec v;
  for (int i = 0; i < kLanes; i++) v[i] = bf16_to_float(p[i]);
  return v;
#endif
}
inline vec load(const uint8_t* p) {
#if defined(__AVX512F__)
  return vec(_mm512_cvtepi32_ps(
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))));
#elif defined(__AVX2__)
  return vec(_mm256_cvtepi32_ps(
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))));
#else
  vec v;
  for (int i = 0; i < kLanes; i++) v[i] = static_cast<float>(p[i]);
  return v;
#endif
}
inline vec load(const int8_t* p) {
#if defined(__AVX512F__)
  return vec(_mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))));
#elif defined(__AVX2__)
  return vec(_mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))));
#else
  vec v;
  for (int i = 0; i < kLanes; i++) v[i] = static_cast<float>(p[i]);
  return v;
#endif
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// dst[0 .. n) = src[0 .. n) widened to fp32.
template <class T>
inline void widen_row(float* dst, const T* src, int n) {
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) store(dst + i, load(src + i));
  for (; i < n; i++) dst[i] = widen(src[i]);
}

// dst[0 .. n) = src[0 .. n) rounded to half as core's float_to_half rounds them (to nearest
// even, overflow to infinity, NaN quieted with its top payload bits): F16C's vcvtps2ph where the
// target has it (the tests compare the two over a sweep of float bit patterns), else that
// function.
inline void narrow_row(half_t* dst, const float* src, int n) {
  int i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < n; i++) dst[i] = float_to_half(src[i]);
}

}  // namespace servekit::kernels::host
