// SPDX-License-Identifier: Apache-2.0
#pragma once
// Causal self-attention over a KV cache on the host: kernels/ref/attention.hpp's loop (each
// query row attends to its slot's cache rows first[r]..row[r]) in vectors.
//  - scores: q . k as a lane-wise FMA chain over the head dimension and a tree lane sum, four
//    keys at a time so that four chains are in flight;
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
        thread_local std::vector<float> scores;  // one row of scores per thread
        if (scores.size() < static_cast<std::size_t>(max_rows)) scores.resize(max_rows);
        float* att = scores.data();
        const float* q = qkv + static_cast<int64_t>(r) * 3 * C + h * hd;
        const int t0 = first[r], T = row[r] + 1;
        auto key = [&](int t) { return kv.k + kv.offset(slot[r], t) + h * hd; };
        auto value = [&](int t) { return kv.v + kv.offset(slot[r], t) + h * hd; };
        int t = t0;
        for (; t + 4 <= T; t += 4) {  // four independent chains
          const float s0 = dot(q, key(t), hd), s1 = dot(q, key(t + 1), hd);
          const float s2 = dot(q, key(t + 2), hd), s3 = dot(q, key(t + 3), hd);
          att[t] = s0 * scale, att[t + 1] = s1 * scale, att[t + 2] = s2 * scale;
          att[t + 3] = s3 * scale;
        }
        for (; t < T; t++) att[t] = dot(q, key(t), hd) * scale;
        const float inv = softmax_in_place(att, t0, T);
        float* o = out + static_cast<int64_t>(r) * C + h * hd;
        switch (nv) {
          case 1:
            return weighted_sum<1>(o, att, inv, t0, T, value);
          case 2:
            return weighted_sum<2>(o, att, inv, t0, T, value);
          case 4:
            return weighted_sum<4>(o, att, inv, t0, T, value);
          case 8:
            return weighted_sum<8>(o, att, inv, t0, T, value);
          default:
            return weighted_sum_any(o, att, inv, t0, T, hd, value);
        }
      },
      4);
}

}  // namespace servekit::kernels::host
