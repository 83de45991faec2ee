// SPDX-License-Identifier: Apache-2.0
#pragma once
// Causal self-attention over a KV cache on the host: kernels/ref/attention.hpp's loop (each
// query row attends to its slot's cache rows first[r]..row[r]) with the head dimension in
// vectors. A score is a lane-wise chain over the head dimension and one lane sum, four keys at
// a time so that four chains are in flight; the output row adds p * v in vectors. Each
// (row, head) is computed alone in one fixed order, so a row's output does not depend on the
// batch around it, and prefill and decode rows take the same path (cached decode equals the
// no-cache recompute bit for bit).
#include <cmath>
#include <cstdint>
#include <vector>

#include "servekit/core/thread_pool.hpp"
#include "servekit/kernels/host/simd.hpp"
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

// o (hd) += p * v (hd).
template <class E>
inline void add_scaled(float* o, float p, const E* v, int hd) {
  const vec pv = vec{} + p;
  int d = 0;
  for (; d + kLanes <= hd; d += kLanes) store(o + d, madd(pv, load(v + d), load(o + d)));
  for (; d < hd; d++) o[d] = madd(p, widen(v[d]), o[d]);
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
  parallel_for(
      N * n_head,
      [&](int rh) {
        const int r = rh / n_head, h = rh % n_head;
        thread_local std::vector<float> scores;  // one row of scores per thread
        if (scores.size() < static_cast<std::size_t>(max_rows)) scores.resize(max_rows);
        float* att = scores.data();
        const float* q = qkv + static_cast<int64_t>(r) * 3 * C + h * hd;
        const int t0 = first[r], T = row[r] + 1;
        auto key = [&](int t) { return kv.k + kv.offset(slot[r], t) + h * hd; };
        int t = t0;
        for (; t + 4 <= T; t += 4) {  // four independent chains
          const float s0 = dot(q, key(t), hd), s1 = dot(q, key(t + 1), hd);
          const float s2 = dot(q, key(t + 2), hd), s3 = dot(q, key(t + 3), hd);
          att[t] = s0 * scale, att[t + 1] = s1 * scale, att[t + 2] = s2 * scale;
          att[t + 3] = s3 * scale;
        }
        for (; t < T; t++) att[t] = dot(q, key(t), hd) * scale;
        float maxv = -INFINITY;
        for (t = t0; t < T; t++) maxv = att[t] > maxv ? att[t] : maxv;
        float sum = 0.f;
        for (t = t0; t < T; t++) {
          att[t] = std::exp(att[t] - maxv);
          sum += att[t];
        }
        const float inv = 1.f / sum;
        float* o = out + static_cast<int64_t>(r) * C + h * hd;
        for (int d = 0; d < hd; d++) o[d] = 0.f;
        for (t = t0; t < T; t++)
          add_scaled(o, att[t] * inv, kv.v + kv.offset(slot[r], t) + h * hd, hd);
      },
      4);
}

}  // namespace servekit::kernels::host
