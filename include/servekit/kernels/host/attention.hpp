// SPDX-License-Identifier: Apache-2.0
#pragma once
// Causal self-attention over a KV cache on the host: kernels/ref/attention.hpp's loop (each
// query row attends to its slot's cache rows first[r]..row[r]) in vectors.
//  - scores: q . k as a lane-wise FMA chain over the head dimension and a tree lane sum, as
//    many keys at a time as a vector has lanes (q in registers, the lane sums of all the
//    chains taken together), else four at a time so that four chains are in flight;
//  - softmax: the max, the exponentials (host/vmath.hpp's exp) and their sum in vectors of
//    consecutive keys, counted from the row's first key;
//  - output: p * v added into accumulators that stay in registers (two sets, even and odd
//    keys, so that two FMA chains are in flight), when the head is 1, 2, 4 or 8 vectors wide.
// Each (row, head) is computed alone in one fixed order that depends only on its own keys, so a
// row's output does not depend on the batch around it, and prefill and decode rows take the
// same path (cached decode equals the no-cache recompute bit for bit).
#include <cmath>
#include <cstdint>
#include <vector>

#include "servekit/core/thread_pool.hpp"
#include "servekit/kernels/host/simd.hpp"
#include "servekit/kernels/host/vmath.hpp"
#include "servekit/kernels/ref/attention.hpp"

namespace servekit::kernels::host {

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
inline vec lane_sums(const vec* a) {
  __m512 p[8], q[4], r[2];
  for (int j = 0; j < 8; j++) {  // i + 8: [a0 lanes 0-7 | a1 lanes 0-7]
    const __m512 x = __m512(a[2 * j]), y = __m512(a[2 * j + 1]);
    p[j] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xee));
  }
  for (int j = 0; j < 4; j++)  // i + 4: one 128-bit block per vector, four vectors
    q[j] = _mm512_add_ps(_mm512_shuffle_f32x4(p[2 * j], p[2 * j + 1], 0x88),
                         _mm512_shuffle_f32x4(p[2 * j], p[2 * j + 1], 0xdd));
  for (int j = 0; j < 2; j++)  // i + 2 within each block: block b holds vectors b, 4 + b
    r[j] = _mm512_add_ps(_mm512_shuffle_ps(q[2 * j], q[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(q[2 * j], q[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // i + 1: lane 4b + m holds vector 4m + b; put vector k in lane k.
  const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(r[0], r[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(r[0], r[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i to_key = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return vec(_mm512_permutexvar_ps(to_key, s));
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

// att[t] = scale * q . k_t for t in [t0, T), each dot()'s bits. NV: the head's width in vectors
// (q and every key NV vectors; 0: any width). kLanes keys at a time where lane_sums exists:
// q stays in registers, each key's chain is dot()'s, and the chains are summed together.
template <int NV, class Key>
inline void scores(float* att, const float* q, Key&& key, int t0, int T, int hd, float scale) {
  int t = t0;
#if defined(__AVX512F__) || defined(__AVX2__)
  if constexpr (NV > 0) {
    vec qv[NV];
    for (int i = 0; i < NV; i++) qv[i] = load(q + i * kLanes);
    for (; t + kLanes <= T; t += kLanes) {
      vec acc[kLanes];
      for (int j = 0; j < kLanes; j++) {
        const auto* k = key(t + j);
        acc[j] = vec{};
        for (int i = 0; i < NV; i++) acc[j] = madd(qv[i], load(k + i * kLanes), acc[j]);
      }
      store(att + t, lane_sums(acc) * scale);
    }
  }
#endif
  for (; t + 4 <= T; t += 4) {  // four independent chains
    const float s0 = dot(q, key(t), hd), s1 = dot(q, key(t + 1), hd);
    const float s2 = dot(q, key(t + 2), hd), s3 = dot(q, key(t + 3), hd);
    att[t] = s0 * scale, att[t + 1] = s1 * scale, att[t + 2] = s2 * scale;
    att[t + 3] = s3 * scale;
  }
  for (; t < T; t++) att[t] = dot(q, key(t), hd) * scale;
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

// o (NV vectors) = sum_t p_t v_t, the head's features in registers.
template <int NV, class Value>
inline void weighted_sum(float* o, const float* att, float inv, int t0, int T, Value&& value) {
  vec a[NV] = {}, b[NV] = {};
  int t = t0;
  for (; t + 2 <= T; t += 2) {
    const auto* v0 = value(t);
    const auto* v1 = value(t + 1);
    const vec p0 = vec{} + att[t] * inv, p1 = vec{} + att[t + 1] * inv;
    for (int i = 0; i < NV; i++) {
      a[i] = madd(p0, load(v0 + i * kLanes), a[i]);
      b[i] = madd(p1, load(v1 + i * kLanes), b[i]);
    }
  }
  if (t < T) {
    const auto* v0 = value(t);
    const vec p0 = vec{} + att[t] * inv;
    for (int i = 0; i < NV; i++) a[i] = madd(p0, load(v0 + i * kLanes), a[i]);
  }
  for (int i = 0; i < NV; i++) store(o + i * kLanes, a[i] + b[i]);
}

// Any head width: the output row in memory.
template <class Value>
inline void weighted_sum_any(float* o, const float* att, float inv, int t0, int T, int hd,
                             Value&& value) {
  for (int d = 0; d < hd; d++) o[d] = 0.f;
  for (int t = t0; t < T; t++) {
    const auto* v = value(t);
    const float p = att[t] * inv;
    const vec pv = vec{} + p;
    int d = 0;
    for (; d + kLanes <= hd; d += kLanes) store(o + d, madd(pv, load(v + d), load(o + d)));
    for (; d < hd; d++) o[d] = madd(p, widen(v[d]), o[d]);
  }
}

template <ref::KvRowView View>
void attention(float* out,        // (N, C)
               const float* qkv,  // (N, 3C): only q is read
               const View& kv,
               const int32_t* slot,   // (N)
               const int32_t* first,  // (N) first cache row the query may see
               const int32_t* row,    // (N) its own cache row (the last it may see)
               int N, int C, int n_head, int max_rows) {
  const int hd = C / n_head;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const int nv = hd % kLanes == 0 ? hd / kLanes : 0;
  // Task order: within a run of rows of one slot (a prompt's chunk), the rows of one head are
  // neighbours, so a thread's next task reads the keys and values it has just read (one head of
  // one sequence: a few hundred KB, in L2); a decode row is a run of one, whose heads are
  // neighbours in each cache row. The order changes no row's arithmetic.
  std::vector<int32_t> order(static_cast<std::size_t>(N) * n_head);  // r * n_head + h
  for (int r0 = 0, i = 0; r0 < N;) {
    int r1 = r0 + 1;
    while (r1 < N && slot[r1] == slot[r0]) r1++;
    for (int h = 0; h < n_head; h++)
      for (int r = r0; r < r1; r++) order[i++] = r * n_head + h;
    r0 = r1;
  }
  parallel_for(
      N * n_head,
      [&](int i) {
        const int r = order[i] / n_head, h = order[i] % n_head;
        thread_local std::vector<float> row_scores;  // one row of scores per thread
        if (row_scores.size() < static_cast<std::size_t>(max_rows)) row_scores.resize(max_rows);
        float* att = row_scores.data();
        const float* q = qkv + static_cast<int64_t>(r) * 3 * C + h * hd;
        const int t0 = first[r], T = row[r] + 1;
        auto key = [&](int t) { return kv.k + kv.offset(slot[r], t) + h * hd; };
        auto value = [&](int t) { return kv.v + kv.offset(slot[r], t) + h * hd; };
        float* o = out + static_cast<int64_t>(r) * C + h * hd;
        auto run = [&]<int NV>() {
          scores<NV>(att, q, key, t0, T, hd, scale);
          const float inv = softmax_in_place(att, t0, T);
          if constexpr (NV > 0)
            weighted_sum<NV>(o, att, inv, t0, T, value);
          else
            weighted_sum_any(o, att, inv, t0, T, hd, value);
        };
        switch (nv) {
          case 1:
            return run.template operator()<1>();
          case 2:
            return run.template operator()<2>();
          case 4:
            return run.template operator()<4>();
          case 8:
            return run.template operator()<8>();
          default:
            return run.template operator()<0>();
        }
      },
      4);
}

}  // namespace servekit::kernels::host
