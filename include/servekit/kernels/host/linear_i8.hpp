// SPDX-License-Identifier: Apache-2.0
#pragma once
// W8A8 linears on the host (weights::W8A8): each row of x quantised to int8 as the call starts,
// int8 x int8 products summed in int32 by the CPU's integer dot products (which ones, chosen at
// compile time: host/i8_isa.hpp), the scales applied once per group and row.
// Integer sums are exact in any order, so every instruction set, tile shape and thread split
// gives the same bits: a row's result depends on nothing else in the call (the engine's batch
// invariance), and it is kernels/ref's float chain exactly:
//   acc = fma(s_w[g], float(isum_g), acc) over the groups, y = acc * s_x.
//
// W is read packed (host/packed.hpp, pack_quads): strips of kQNR = 16 columns, each strip its
// K / 4 quads of 16 columns x 4 consecutive k, which is one vpdpbusd operand.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "servekit/core/symmetric_int8.hpp"
#include "servekit/core/thread_pool.hpp"
#include "servekit/kernels/host/i8_isa.hpp"
#include "servekit/kernels/host/matmul.hpp"
#include "servekit/kernels/host/packed.hpp"

namespace servekit::kernels::host {

// W8A8 W as the kernel reads it: codes packed by pack_quads, one scale per group (and column,
// or per tensor), and the groups' column sums of the codes.
struct I8View {
  const int8_t* w = nullptr;  // pack_quads((K, N))
  int K = 0, N = 0;
  int group_rows = 0;               // a multiple of 4
  const float* scale = nullptr;     // (K / group_rows, state_cols)
  const int32_t* colsum = nullptr;  // (K / group_rows, N) where kActBias != 0
  int state_cols = 0;
};

// GCC 12's AVX-512 intrinsics start from an undefined value that it then reports as maybe
// uninitialised (bug 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// Quads of W ahead that a tile asks for, into L2 (as matmul.hpp's kAhead rows).
constexpr int kAheadQ = 32;

// max |x| over a row, as s8_absmax: a maximum is the same in any order, and a row holding a NaN
// goes back to s8_absmax, which returns that NaN. The tail past the vectors is s8_absmax's too.
inline float absmax_row(const float* x, int K) {
  int k = 0;
  float m = 0.f;
#if defined(__AVX2__)
  const __m256 mag = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 m0 = _mm256_setzero_ps(), m1 = m0, nan = m0;
  for (; k + 16 <= K; k += 16) {
    const __m256 a = _mm256_loadu_ps(x + k), b = _mm256_loadu_ps(x + k + 8);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
    m0 = _mm256_max_ps(m0, _mm256_and_ps(a, mag));
    m1 = _mm256_max_ps(m1, _mm256_and_ps(b, mag));
  }
  if (!_mm256_testz_ps(nan, nan)) return s8_absmax(x, K);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_max_ps(m0, m1));
  for (float v : lanes) m = std::max(m, v);
#endif
  return s8_absmax_step(m, s8_absmax(x + k, K - k));
}

// x (K) -> q (K / 4 * kActQuad): codes as the tiles read them (plus kActBias), each quad of 4
// followed by their absolute values where the ISA asks for them (kActQuad 8); returns the row's
// scale. The same codes as quantize_s8 (core/symmetric_int8.hpp): the vector divide is IEEE's,
// and vcvtps2dq rounds to nearest even as nearbyint does in the default rounding mode.
inline float quantize_row(ActCode* q, const float* x, int K) {
  const float s = s8_scale(absmax_row(x, K));
  int k = 0;
  if (s > 0.f && s <= std::numeric_limits<float>::max()) {  // else not finite: codes don't matter
#if defined(__AVX512F__) && !defined(SERVEKIT_I8_YMM_VNNI)  // the ymm build runs AVX2's, tested
    const __m512 sv = _mm512_set1_ps(s);
    for (; k + 16 <= K; k += 16) {
      __m512i c = _mm512_cvtps_epi32(_mm512_div_ps(_mm512_loadu_ps(x + k), sv));
      c = _mm512_add_epi32(c, _mm512_set1_epi32(kActBias));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k), _mm512_cvtepi32_epi8(c));  // low bytes
    }
#elif defined(__AVX2__)
    const __m256 sv = _mm256_set1_ps(s);
    for (; k + 8 <= K; k += 8) {
      const __m256i c = _mm256_cvtps_epi32(_mm256_div_ps(_mm256_loadu_ps(x + k), sv));
      const __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
      if constexpr (kActQuad == 8) {  // codes in -127..127: signed saturation changes none
        const __m128i c8 = _mm_packs_epi16(h, h);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 2 * k),
                         _mm_unpacklo_epi32(c8, _mm_abs_epi8(c8)));
      } else  // AVX-VNNI: codes + 128 in 1..255, unsigned saturation changes none
        _mm_storel_epi64(reinterpret_cast<__m128i*>(q + k),
                         _mm_packus_epi16(_mm_add_epi16(h, _mm_set1_epi16(kActBias)), h));
    }
#endif
  }
  for (; k < K; k++) {
    const int8_t c = s8_code(x[k], s);
    ActCode* at = q + k / 4 * kActQuad + k % 4;
    at[0] = static_cast<ActCode>(c + kActBias);
    if constexpr (kActQuad == 8) at[4] = static_cast<ActCode>(c < 0 ? -c : c);
  }
  return s;
}

// The micro-kernel: out (MR, NS * kQNR) at ldo = the int32 sums of x (MR rows, ldx apart, each
// quad kActQuad bytes) over nq quads of NS strips (strip s at w + s * ss, each quad kQNR x 4).
template <int MR, int NS>
inline void tile_i8(int32_t* out, int ldo, const ActCode* x, int64_t ldx, const int8_t* w,
                    int64_t ss, int nq) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  __m512i t[MR][NS];
  SERVEKIT_UNROLL_FULLY
  for (int r = 0; r < MR; r++) {
    SERVEKIT_UNROLL_FULLY
    for (int s = 0; s < NS; s++) t[r][s] = _mm512_setzero_si512();
  }
  for (int q = 0; q < nq; q++) {
    __m512i wv[NS];
    SERVEKIT_UNROLL_FULLY
    for (int s = 0; s < NS; s++) {
      prefetch_l2(w + s * ss, static_cast<int64_t>(q + kAheadQ) * 4 * kQNR);
      wv[s] = _mm512_loadu_si512(w + s * ss + q * 4 * kQNR);
    }
    SERVEKIT_UNROLL_FULLY
    for (int r = 0; r < MR; r++) {
      int32_t x4;
      std::memcpy(&x4, x + r * ldx + 4 * q, 4);
      const __m512i xb = _mm512_set1_epi32(x4);
      SERVEKIT_UNROLL_FULLY
      for (int s = 0; s < NS; s++) t[r][s] = _mm512_dpbusd_epi32(t[r][s], xb, wv[s]);
    }
  }
  SERVEKIT_UNROLL_FULLY
  for (int r = 0; r < MR; r++) {
    SERVEKIT_UNROLL_FULLY
    for (int s = 0; s < NS; s++) _mm512_storeu_si512(out + r * ldo + s * kQNR, t[r][s]);
  }
#elif defined(SERVEKIT_I8_YMM_VNNI) || defined(SERVEKIT_I8_YMM_SIGNED)
  // A strip's quad is two ymm: columns 0-7 and 8-15, each lane 4 k of its column.
  __m256i t[MR][NS * 2];
  SERVEKIT_UNROLL_FULLY
  for (int r = 0; r < MR; r++) {
    SERVEKIT_UNROLL_FULLY
    for (int c = 0; c < NS * 2; c++) t[r][c] = _mm256_setzero_si256();
  }
  for (int q = 0; q < nq; q++) {
    __m256i wv[NS * 2];
    SERVEKIT_UNROLL_FULLY
    for (int s = 0; s < NS; s++) {
      prefetch_l2(w + s * ss, static_cast<int64_t>(q + kAheadQ) * 4 * kQNR);
      SERVEKIT_UNROLL_FULLY
      for (int h = 0; h < 2; h++)
        wv[2 * s + h] = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(w + s * ss + q * 4 * kQNR + 32 * h));
    }
    SERVEKIT_UNROLL_FULLY
    for (int r = 0; r < MR; r++) {
      int32_t x4;
      std::memcpy(&x4, x + r * ldx + kActQuad * q, 4);
      const __m256i xb = _mm256_set1_epi32(x4);
#if defined(SERVEKIT_I8_YMM_SIGNED)
      std::memcpy(&x4, x + r * ldx + kActQuad * q + 4, 4);
      const __m256i xa = _mm256_set1_epi32(x4);
      SERVEKIT_UNROLL_FULLY
      for (int c = 0; c < NS * 2; c++) t[r][c] = dot4_ymm(t[r][c], xa, xb, wv[c]);
#else
      SERVEKIT_UNROLL_FULLY
      for (int c = 0; c < NS * 2; c++) t[r][c] = dot4_ymm(t[r][c], xb, wv[c]);
#endif
    }
  }
  SERVEKIT_UNROLL_FULLY
  for (int r = 0; r < MR; r++) {
    SERVEKIT_UNROLL_FULLY
    for (int c = 0; c < NS * 2; c++)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + r * ldo + 8 * c), t[r][c]);
  }
#else
  for (int r = 0; r < MR; r++)
    for (int s = 0; s < NS; s++) {
      int32_t* o = out + r * ldo + s * kQNR;
      std::fill(o, o + kQNR, 0);
      for (int q = 0; q < nq; q++) {
        const int8_t* ws = w + s * ss + q * 4 * kQNR;
        const ActCode* xr = x + r * ldx + kActQuad * q;
        for (int j = 0; j < kQNR; j++)
          for (int i = 0; i < 4; i++) o[j] += int32_t{xr[i]} * int32_t{ws[4 * j + i]};
      }
    }
#endif
}

// tile_i8<rows, NS> for rows in 1 .. kMRq chosen at run time; NS is kNSq or 1.
template <int NS>
inline void tile_i8_rows(int rows, int32_t* out, int ldo, const ActCode* x, int64_t ldx,
                         const int8_t* w, int64_t ss, int nq) {
  with_rows<kMRq>(rows, [&]<int R>() { tile_i8<R, NS>(out, ldo, x, ldx, w, ss, nq); });
}

// The caller's buffer of activation codes, which the workers fill row by row.
inline ActCode* act_scratch(std::size_t n) {
  thread_local std::vector<ActCode> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}
inline int32_t* isum_scratch(std::size_t n) {
  thread_local std::vector<int32_t> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

template <Epilogue E, RowAddend A>
void linear_i8(float* out,             // (M, N)
               const float* x,         // (M, K)
               const I8View& W,        // (K, N)
               const float* b,         // (N) or nullptr
               int M, const A& add) {  // added to the rows before the epilogue
  const int K = W.K, N = W.N, GK = W.group_rows, KQ = K / 4;
  const int64_t KA = static_cast<int64_t>(KQ) * kActQuad;  // a row of codes' bytes
  // Codes (M, KA) and scales (M) of x.
  ActCode* xq = act_scratch(static_cast<std::size_t>(M) * KA);
  float* xs = thread_scratch<3>(M);
  parallel_for(
      M, [&](int r) { xs[r] = quantize_row(xq + r * KA, x + static_cast<int64_t>(r) * K, K); });
  // Tasks of (up to MB rows) x (NB columns, whole strips), as matmul.hpp's gemm.
  constexpr int kMaxNB = 256, MB = 64;
  const int m_blocks = (M + MB - 1) / MB;
  const Panels pn = panels(N, m_blocks, kMaxNB, kQNR);
  const int n_panels = pn.n, NB = pn.NB;
  const int64_t ss = static_cast<int64_t>(KQ) * 4 * kQNR;  // one strip's bytes
  parallel_for(
      m_blocks * n_panels,
      [&](int task) {
        const int m0 = task / n_panels * MB, rows = std::min(MB, M - m0);
        const int n0 = task % n_panels * NB, cols = std::min(NB, N - n0);
        const int strips = (cols + kQNR - 1) / kQNR;
        float* acc = thread_scratch<0>(static_cast<std::size_t>(MB) * kMaxNB);  // (rows, NB)
        int32_t* isum = isum_scratch(static_cast<std::size_t>(MB) * kMaxNB);    // (rows, NB)
        std::fill(acc, acc + static_cast<std::size_t>(rows) * NB, 0.f);
        const ActCode* xb = xq + m0 * KA;
        const int8_t* w0 = W.w + static_cast<int64_t>(n0 / kQNR) * ss;
        for (int g0 = 0; g0 < K; g0 += GK) {
          const int q0 = g0 / 4, nq = GK / 4;
          // Strip by strip (kNSq at a time), every row tile reading them while they sit in L1.
          for (int s = 0; s < strips;) {
            const int ns = strips - s >= kNSq ? kNSq : 1;
            for (int r0 = 0; r0 < rows; r0 += kMRq) {
              const int mr = std::min(kMRq, rows - r0);
              const ActCode* xr = xb + r0 * KA + kActQuad * q0;
              const int8_t* ws = w0 + s * ss + static_cast<int64_t>(q0) * 4 * kQNR;
              int32_t* o = isum + r0 * NB + s * kQNR;
              if (ns == kNSq)
                tile_i8_rows<kNSq>(mr, o, NB, xr, KA, ws, ss, nq);
              else
                tile_i8_rows<1>(mr, o, NB, xr, KA, ws, ss, nq);
            }
            s += ns;
          }
          const int g = g0 / GK;
          const bool pc = W.state_cols > 1;
          const float* sc = W.scale + static_cast<int64_t>(g) * W.state_cols + (pc ? n0 : 0);
          for (int r = 0; r < rows; r++) {
            float* a = acc + r * NB;
            int32_t* is = isum + r * NB;
            if constexpr (kActBias != 0) {
              const int32_t* cs = W.colsum + static_cast<int64_t>(g) * N + n0;
              for (int c = 0; c < cols; c++) is[c] -= kActBias * cs[c];
            }
            for (int c = 0; c < cols; c++)
              a[c] = std::fma(sc[pc ? c : 0], static_cast<float>(is[c]), a[c]);
          }
        }
        float* scratch = thread_scratch<2>(kAddRows * kMaxNB);
        const int32_t* order = store_order(add, m0, rows);
        for (int i = 0; i < rows; i += kAddRows) {
          const int n = std::min(kAddRows, rows - i);
          const float* extra[kAddRows];
          add.rows(order + i, n, std::min(2 * kAddRows, rows - i - n), n0, cols, scratch, extra);
          for (int t = 0; t < n; t++) {
            const int r = order[i + t];
            float* a = acc + (r - m0) * NB;
            const float s = xs[r];
            for (int c = 0; c < cols; c++) a[c] *= s;
            store_row<E>(out + static_cast<int64_t>(r) * N + n0, a, b ? b + n0 : nullptr, extra[t],
                         cols);
          }
        }
      },
      1);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace servekit::kernels::host
