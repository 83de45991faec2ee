// SPDX-License-Identifier: Apache-2.0
#pragma once
// The pieces of the host attention (kernels/host/attention.hpp) for one query row, or two rows
// that share their keys: the scores q . k, the softmax, the weighted sum of the values. Each
// number is computed in one fixed order that depends only on its own row's keys.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "servekit/core/hd.hpp"
#include "servekit/kernels/host/simd.hpp"
#include "servekit/kernels/host/vmath.hpp"

namespace servekit::kernels::host {

// A key's or value's factor from an int8 cache (kv::I8): its row's scale for the head. Other
// caches pass NoScale, and no multiplication is made at all (their bits stay what they were).
struct NoScale {
  static constexpr bool on = false;
  float operator()(int) const { return 1.f; }
};
template <class F>
struct RowScale {
  static constexpr bool on = true;
  F f;
  float operator()(int t) const { return f(t); }
};

// Asks for a cache row's head (hd elements) ahead of its use. A head is a few lines every C
// elements of the cache, a stride the hardware prefetchers do not follow, so a decode row's
// keys and values came as demand misses, a handful in flight: the f32 cache's attention ran at
// about half the read bandwidth (docs/PERFORMANCE.md). Only rows the loop will read are asked
// for (a paged cache's lookup of a row past the sequence would read past its block table).
template <class E>
SERVEKIT_HOST_INLINE void prefetch_head(const E* p, int hd) {
  const char* c = reinterpret_cast<const char*>(p);
  for (int b = 0; b < hd * static_cast<int>(sizeof(E)); b += 64) prefetch_kept<3>(c + b);
}
// How many keys ahead the scores and the weighted sums ask for theirs.
inline constexpr int kAheadKeys = 8;

// q . k over hd features; k in the cache's element type.
template <class E>
inline float dot(const float* q, const E* k, int hd) {
  vec acc{};
  int d = 0;
  for (; d + kLanes <= hd; d += kLanes) acc = madd(load(q + d), load(k + d), acc);
  float s = lane_sum(acc);
  for (; d < hd; d++) s = madd(q[d], widen(k[d]), s);
  return s;
}

#if defined(__AVX512F__) || defined(__AVX2__)
// The lane sums of kLanes vectors at once, out[j] = lane_sum(a[j]): lane_sum's tree, lane i
// with lane i + kLanes / 2 first, then with i + kLanes / 4, ..., done for all the vectors
// together, two vectors' lanes a shuffle. Every sum is lane_sum's, bit for bit (an add's result
// does not depend on its operands' order); kLanes - 1 adds where one vector at a time takes
// log2(kLanes) each, plus the extracts.
#if defined(__AVX512F__)
// GCC 12's unmasked shuffle and permute pass an uninitialised vector as the merge source, which
// -Wmaybe-uninitialized reports at every inlined use; the masked forms with every lane taken
// are the same instruction without it.
template <int kImm>
inline __m512 shuffle_blocks(__m512 x, __m512 y) {
  return _mm512_mask_shuffle_f32x4(x, 0xffff, x, y, kImm);
}
inline vec lane_sums(const vec* a) {
  __m512 p[8], q[4], r[2];
  for (int j = 0; j < 8; j++) {  // i + 8: [a0 lanes 0-7 | a1 lanes 0-7]
    const __m512 x = __m512(a[2 * j]), y = __m512(a[2 * j + 1]);
    p[j] = _mm512_add_ps(shuffle_blocks<0x44>(x, y), shuffle_blocks<0xee>(x, y));
  }
  for (int j = 0; j < 4; j++)  // i + 4: one 128-bit block per vector, four vectors
    q[j] = _mm512_add_ps(shuffle_blocks<0x88>(p[2 * j], p[2 * j + 1]),
                         shuffle_blocks<0xdd>(p[2 * j], p[2 * j + 1]));
  for (int j = 0; j < 2; j++)  // i + 2 within each block: block b holds vectors b, 4 + b
    r[j] = _mm512_add_ps(_mm512_shuffle_ps(q[2 * j], q[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(q[2 * j], q[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // i + 1: lane 4b + m holds vector 4m + b; put vector k in lane k.
  const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(r[0], r[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(r[0], r[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i to_key = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return vec(_mm512_mask_permutexvar_ps(s, 0xffff, to_key, s));
}
#else
inline vec lane_sums(const vec* a) {
  __m256 p[4], r[2];
  for (int j = 0; j < 4; j++) {  // i + 4: [a0 lanes 0-3 | a1 lanes 0-3]
    const __m256 x = __m256(a[2 * j]), y = __m256(a[2 * j + 1]);
    p[j] = _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20), _mm256_permute2f128_ps(x, y, 0x31));
  }
  for (int j = 0; j < 2; j++)  // i + 2 within each block: block b holds vectors b, 2 + b
    r[j] = _mm256_add_ps(_mm256_shuffle_ps(p[2 * j], p[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm256_shuffle_ps(p[2 * j], p[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // i + 1: lane 4b + m holds vector 2m + b; put vector k in lane k.
  const __m256 s = _mm256_add_ps(_mm256_shuffle_ps(r[0], r[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(r[0], r[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return vec(_mm256_permutevar8x32_ps(s, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}
#endif
#endif

#if defined(__AVX512F__) || defined(__AVX2__)
// att[t .. t + kLanes) = scale * q . k (q in qv, NV vectors), each key's chain dot()'s and the
// chains summed together; asks for the next block's keys below `ahead`. Keys in groups whose
// chains fit the registers beside q (AVX2, 64-wide heads: q takes 8 of the 16 ymm, so 4 chains
// at a time, not 8 and a spill in the middle of each).
template <int NV, class Key, class KScale>
SERVEKIT_HOST_INLINE void score_block(float* att, const vec* qv, const Key& key, int t, int ahead,
                                      float scale, KScale& ks) {
  constexpr int KG = NV + kLanes + 2 <= kRegisters ? kLanes : kLanes / 2;
  vec acc[kLanes];
  for (int g = 0; g < kLanes; g += KG) {
    for (int j = g; j < g + KG; j++) {
      const auto* k = key(t + j);
      if (t + j + kLanes < ahead) prefetch_head(key(t + j + kLanes), NV * kLanes);
      acc[j] = vec{};
      for (int i = 0; i < NV; i++) acc[j] = madd(qv[i], load(k + i * kLanes), acc[j]);
    }
  }
  if constexpr (KScale::on) {
    vec f;
    for (int j = 0; j < kLanes; j++) f[j] = scale * ks(t + j);
    store(att + t, lane_sums(acc) * f);
  } else {
    store(att + t, lane_sums(acc) * scale);
  }
}
#endif

// att[t] = scale * q . k_t for t in [t0, T), each dot()'s bits. NV: the head's width in vectors
// (q and every key NV vectors; 0: any width). kLanes keys at a time where lane_sums exists
// (score_block), q in registers.
// With an int8 cache, each score is q . k_t * (scale * ks(t)), whichever path computes it.
template <int NV, class Key, class KScale = NoScale>
inline void scores(float* att, const float* q, Key&& key, int t0, int T, int hd, float scale,
                   KScale ks = {}) {
  auto factor = [&](int u) { return KScale::on ? scale * ks(u) : scale; };
  int t = t0;
#if defined(__AVX512F__) || defined(__AVX2__)
  if constexpr (NV > 0) {
    vec qv[NV];
    for (int i = 0; i < NV; i++) qv[i] = load(q + i * kLanes);
    for (; t + kLanes <= T; t += kLanes) score_block<NV>(att, qv, key, t, T, scale, ks);
  }
#endif
  for (; t + 4 <= T; t += 4) {  // four independent chains
    const float s0 = dot(q, key(t), hd), s1 = dot(q, key(t + 1), hd);
    const float s2 = dot(q, key(t + 2), hd), s3 = dot(q, key(t + 3), hd);
    att[t] = s0 * factor(t), att[t + 1] = s1 * factor(t + 1), att[t + 2] = s2 * factor(t + 2);
    att[t + 3] = s3 * factor(t + 3);
  }
  for (; t < T; t++) att[t] = dot(q, key(t), hd) * factor(t);
}

// att[t0 .. T) = exp(att - max), returns 1 / their sum. Vectors of keys start at t0, so the
// lanes a key falls in depend on the row only; the last partial vector runs padded.
inline float softmax_in_place(float* att, int t0, int T) {
  vec m = vec{} - INFINITY;
  int t = t0;
  for (; t + kLanes <= T; t += kLanes) {
    const vec a = load(att + t);
    m = a > m ? a : m;
  }
  float maxv = -INFINITY;
  for (int i = 0; i < kLanes; i++) maxv = m[i] > maxv ? m[i] : maxv;
  for (int u = t; u < T; u++) maxv = att[u] > maxv ? att[u] : maxv;
  vec sum{};
  for (t = t0; t + kLanes <= T; t += kLanes) {
    const vec e = exp(load(att + t) - maxv);
    store(att + t, e);
    sum += e;
  }
  if (t < T) {
    vec a{};
    for (int j = 0; t + j < T; j++) a[j] = att[t + j] - maxv;
    const vec e = exp(a);
    for (int j = 0; t + j < T; j++) att[t + j] = e[j], sum[j] += e[j];
  }
  return 1.f / lane_sum(sum);
}

// A value's weight: p_t = att[t] * inv, times its int8 scale where there is one.
template <class VScale>
inline float weight(const float* att, float inv, int t, VScale& vs) {
  if constexpr (VScale::on)
    return att[t] * inv * vs(t);
  else
    return att[t] * inv;
}

// The pairs of keys of weighted_sum_from over [t, T): p_t v_t added into a for even keys (from
// the row's first), into b for odd ones; asks for values kAheadKeys on, below `ahead`. Returns
// where it stopped (T, or T - 1 when [t, T) is odd).
template <int NV, class Value, class VScale>
SERVEKIT_HOST_INLINE int weighted_sum_pairs(vec* a, vec* b, const float* att, float inv, int t,
                                            int T, int ahead, const Value& value, VScale& vs) {
  for (; t + 2 <= T; t += 2) {
    const auto* v0 = value(t);
    const auto* v1 = value(t + 1);
    if (t + 1 + kAheadKeys < ahead)
      prefetch_head(value(t + kAheadKeys), NV * kLanes),
          prefetch_head(value(t + 1 + kAheadKeys), NV * kLanes);
    const vec p0 = vec{} + weight(att, inv, t, vs), p1 = vec{} + weight(att, inv, t + 1, vs);
    for (int i = 0; i < NV; i++) {
      a[i] = madd(p0, load(v0 + i * kLanes), a[i]);
      b[i] = madd(p1, load(v1 + i * kLanes), b[i]);
    }
  }
  return t;
}

// o (NV vectors) = sum_t p_t v_t over [t, T), the head's features in registers: even keys
// (from the row's first) into a, odd ones into b, so that two FMA chains are in flight. a and b
// come in holding the keys before t (none: zero).
template <int NV, class Value, class VScale = NoScale>
inline void weighted_sum_from(float* o, vec* a, vec* b, const float* att, float inv, int t, int T,
                              Value&& value, VScale vs = {}) {
  t = weighted_sum_pairs<NV>(a, b, att, inv, t, T, T, value, vs);
  if (t < T) {
    const auto* v0 = value(t);
    const vec p0 = vec{} + weight(att, inv, t, vs);
    for (int i = 0; i < NV; i++) a[i] = madd(p0, load(v0 + i * kLanes), a[i]);
  }
  for (int i = 0; i < NV; i++) store(o + i * kLanes, a[i] + b[i]);
}
// A value row's features from `from` on: the weighted sums' slices of a head.
template <class Value>
struct Slice {
  Value& value;
  int from;
  SERVEKIT_FORCE_INLINE auto operator()(int t) const { return value(t) + from; }
};

// Where a and b would not fit the registers (AVX2, 64-wide heads: 16 ymm), the head's features
// are summed in two halves, one pass over the keys each: every lane's chain is the same.
template <int NV, class Value, class VScale = NoScale>
inline void weighted_sum(float* o, const float* att, float inv, int t0, int T, Value&& value,
                         VScale vs = {}) {
  if constexpr (2 * NV + 4 > kRegisters && NV % 2 == 0) {
    constexpr int H = NV / 2;
    for (int half = 0; half < 2; half++) {
      vec a[H] = {}, b[H] = {};
      weighted_sum_from<H>(o + half * H * kLanes, a, b, att, inv, t0, T,
                           Slice<Value>{value, half * H * kLanes}, vs);
    }
  } else {
    vec a[NV] = {}, b[NV] = {};
    weighted_sum_from<NV>(o, a, b, att, inv, t0, T, value, vs);
  }
}

// Any head width: the output row in memory.
template <class Value, class VScale = NoScale>
inline void weighted_sum_any(float* o, const float* att, float inv, int t0, int T, int hd,
                             Value&& value, VScale vs = {}) {
  for (int d = 0; d < hd; d++) o[d] = 0.f;
  for (int t = t0; t < T; t++) {
    const auto* v = value(t);
    const float p = weight(att, inv, t, vs);
    const vec pv = vec{} + p;
    int d = 0;
    for (; d + kLanes <= hd; d += kLanes) store(o + d, madd(pv, load(v + d), load(o + d)));
    for (; d < hd; d++) o[d] = madd(p, widen(v[d]), o[d]);
  }
}

// Two query rows of one sequence and head that start at the same key (neighbours in a prompt
// chunk): each key and value is loaded once for both. Every number is what the rows compute
// alone: a score is its own chain (scores()), and each row's weighted sum takes its keys in its
// own order into its own a / b; the keys only one row sees are then finished alone. Where the
// two rows' q or accumulators do not fit the registers (AVX2, 64-wide heads), q is read from L1
// as each key needs it and the weighted sums run in slices of the head's features: the loads
// the pair saves are the cache's, from L2, which bound the rows' tasks.
#if defined(__AVX512F__) || defined(__AVX2__)
inline constexpr int kPairMaxNV = kRegisters == 32 ? 4 : 8;

// Both rows' scores for keys [t, min(T0, T1)) in blocks of kLanes / 2 keys; returns where the
// blocks stopped.
template <int NV, class Key, class KScale = NoScale>
inline int scores_pair(float* att0, float* att1, const float* q0, const float* q1, Key&& key, int t,
                       int T, float scale, KScale ks = {}) {
  constexpr int KB = kLanes / 2;
  // Both rows' q in registers when they fit beside the accumulators; otherwise from L1.
  constexpr bool kQInRegisters = 2 * NV + kLanes + 1 <= kRegisters;
  vec qa[NV], qb[NV];
  if constexpr (kQInRegisters)
    for (int i = 0; i < NV; i++) qa[i] = load(q0 + i * kLanes), qb[i] = load(q1 + i * kLanes);
  for (; t + KB <= T; t += KB) {
    vec acc[kLanes];
    for (int j = 0; j < KB; j++) {
      const auto* k = key(t + j);
      acc[j] = vec{}, acc[KB + j] = vec{};
      for (int i = 0; i < NV; i++) {
        vec kv = load(k + i * kLanes);
        in_register(kv);  // one load for both rows (simd.hpp)
        if constexpr (kQInRegisters) {
          acc[j] = madd(qa[i], kv, acc[j]);
          acc[KB + j] = madd(qb[i], kv, acc[KB + j]);
        } else {
          acc[j] = madd(load(q0 + i * kLanes), kv, acc[j]);
          acc[KB + j] = madd(load(q1 + i * kLanes), kv, acc[KB + j]);
        }
      }
    }
    float s[kLanes];
    if constexpr (KScale::on) {
      vec f;
      for (int j = 0; j < KB; j++) f[j] = f[KB + j] = scale * ks(t + j);
      store(s, lane_sums(acc) * f);
    } else {
      store(s, lane_sums(acc) * scale);
    }
    std::memcpy(att0 + t, s, KB * sizeof(float));
    std::memcpy(att1 + t, s + KB, KB * sizeof(float));
  }
  return t;
}

template <int NV, class Value, class VScale = NoScale>
inline void weighted_sum_pair_slice(float* o0, float* o1, const float* att0, const float* att1,
                                    float inv0, float inv1, int t, int T0, int T1, Value&& value,
                                    VScale vs) {
  vec a0[NV] = {}, b0[NV] = {}, a1[NV] = {}, b1[NV] = {};
  for (const int T = T0 < T1 ? T0 : T1; t + 2 <= T; t += 2) {
    const auto* v0 = value(t);
    const auto* v1 = value(t + 1);
    const vec p00 = vec{} + weight(att0, inv0, t, vs), p01 = vec{} + weight(att0, inv0, t + 1, vs);
    const vec p10 = vec{} + weight(att1, inv1, t, vs), p11 = vec{} + weight(att1, inv1, t + 1, vs);
    for (int i = 0; i < NV; i++) {
      vec x0 = load(v0 + i * kLanes), x1 = load(v1 + i * kLanes);
      in_register(x0), in_register(x1);  // one load for both rows (simd.hpp)
      a0[i] = madd(p00, x0, a0[i]), b0[i] = madd(p01, x1, b0[i]);
      a1[i] = madd(p10, x0, a1[i]), b1[i] = madd(p11, x1, b1[i]);
    }
  }
  weighted_sum_from<NV>(o0, a0, b0, att0, inv0, t, T0, value, vs);
  weighted_sum_from<NV>(o1, a1, b1, att1, inv1, t, T1, value, vs);
}
template <int NV, class Value, class VScale = NoScale>
inline void weighted_sum_pair(float* o0, float* o1, const float* att0, const float* att1,
                              float inv0, float inv1, int t, int T0, int T1, Value&& value,
                              VScale vs = {}) {
  // Slices of S vectors: 4 S accumulators, 4 weights and 2 values in the registers.
  constexpr int S = 4 * NV + 6 <= kRegisters         ? NV
                    : 4 * (NV / 2) + 6 <= kRegisters ? NV / 2
                                                     : NV / 4;
  static_assert(S > 0 && NV % S == 0);
  if constexpr (S == NV) {
    weighted_sum_pair_slice<NV>(o0, o1, att0, att1, inv0, inv1, t, T0, T1, value, vs);
  } else {
    for (int f = 0; f < NV; f += S)
      weighted_sum_pair_slice<S>(o0 + f * kLanes, o1 + f * kLanes, att0, att1, inv0, inv1, t, T0,
                                 T1, Slice<Value>{value, f * kLanes}, vs);
  }
}
#else
inline constexpr int kPairMaxNV = 0;
#endif

}  // namespace servekit::kernels::host
