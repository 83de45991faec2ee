// SPDX-License-Identifier: Apache-2.0
#pragma once
// The integer dot product the host's W8A8 kernels (host/linear_i8.hpp) are built on, chosen at
// compile time, with the activation codes and tile shape it asks for:
//   AVX-512 VNNI  vpdpbusd: 64 unsigned x signed byte products, each 4 added into 16 int32
//                 lanes. x goes in as xq + 128 (unsigned); colsum takes 128 sum_k w back.
//   AVX-VNNI      the same instruction on ymm (32 products into 8 lanes), for AVX2 cores that
//                 have it; also what an AVX-512 VNNI machine runs when built for x86-64-v3
//                 plus VNNI + VL (the test of this path here).
//   AVX2          vpmaddubsw on |x| (unsigned) and w with x's sign (vpsignb), then vpmaddwd
//                 by ones: 32 products into 8 lanes of 4, vpdpbusd's layout in four
//                 instructions (|x| is stored beside x as the row is quantised, so the tile
//                 does not take it again for every 32 products: 11% of its vector
//                 instructions). Codes are in -127..127 (core/symmetric_int8.hpp), so a pair
//                 sum is at most 2 x 127 x 127 = 32258 and the int16 step never saturates
//                 (x + 128 against w could: 255 x 127 x 2 > 32767). 1.7x the products per
//                 cycle of widening w to int16 for vpmaddwd, the earlier tile (Zen 4).
//   otherwise     plain integer loops.
// Its own header so that what only asks which instruction (the benchmarks' int8 peak) does not
// take in the kernels and the thread pool.
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace servekit::kernels::host {

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
using ActCode = uint8_t;  // xq + 128
constexpr int kActBias = 128;
constexpr int kActQuad = 4;        // bytes a quad of 4 activations takes in the tiles' rows
constexpr int kMRq = 6, kNSq = 4;  // 6 rows x 4 strips: 24 of 32 zmm accumulate
constexpr const char* kI8Isa = "AVX512-VNNI";
#elif defined(__AVX2__) && \
    (defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__)))
#define SERVEKIT_I8_YMM_VNNI 1
using ActCode = uint8_t;  // xq + 128
constexpr int kActBias = 128;
constexpr int kActQuad = 4;
constexpr int kMRq = 6, kNSq = 1;  // 6 rows x 2 halves of a strip: 12 of 16 ymm accumulate
constexpr const char* kI8Isa = "AVX-VNNI";
// acc + the sums of 4 products x * w per int32 lane (x the activation codes + 128). vpdpbusd on
// ymm: VEX-encoded with AVX-VNNI (Alder Lake and later, Zen 5), EVEX-encoded with AVX-512 VNNI +
// VL, the same operation (which lets a machine with the latter test this path).
inline __m256i dot4_ymm(__m256i acc, __m256i x, __m256i w) {
#if defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(acc, x, w);
#else
  return _mm256_dpbusd_epi32(acc, x, w);
#endif
}
#elif defined(__AVX2__)
#define SERVEKIT_I8_YMM_SIGNED 1
using ActCode = int8_t;
constexpr int kActBias = 0;
constexpr int kActQuad = 8;        // a quad's 4 codes, then their 4 absolute values
constexpr int kMRq = 4, kNSq = 1;  // 4 rows x 2 halves of a strip: 8 of 16 ymm accumulate
constexpr const char* kI8Isa = "AVX2";
// acc + the sums of 4 products x * w per int32 lane, as vpdpbusd with x signed: |x| (xa,
// unsigned) against w carrying x's sign.
inline __m256i dot4_ymm(__m256i acc, __m256i xa, __m256i x, __m256i w) {
  const __m256i p = _mm256_maddubs_epi16(xa, _mm256_sign_epi8(w, x));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}
#else
using ActCode = int8_t;
constexpr int kActBias = 0;
constexpr int kActQuad = 4;
constexpr int kMRq = 4, kNSq = 1;
constexpr const char* kI8Isa = "scalar";
#endif

}  // namespace servekit::kernels::host
