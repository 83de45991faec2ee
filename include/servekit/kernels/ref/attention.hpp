// SPDX-License-Identifier: Apache-2.0
#pragma once
// Causal self-attention over a KV cache. Each new token's keys and values are appended to its
// sequence's cache rows first; then each query row attends to every cached row up to and
// including its own position. Prefill (many rows per sequence) and decode (one row) are the
// same loop.
#include <cmath>
#include <cstdint>
#include <vector>

namespace servekit::kernels::ref {

// One layer of a contiguous cache: slot s, position t, head h starts at
// k + s * slot_stride + t * C + h * head_dim.
struct KvLayerView {
  float* k;
  float* v;
  int64_t slot_stride;  // max_len * C
};

// Writes the K and V parts of qkv into the cache rows of each token.
inline void kv_append(KvLayerView kv,
                      const float* qkv,     // (N, 3C)  q | k | v
                      const int32_t* slot,  // (N) cache slot of each row
                      const int32_t* pos,   // (N) position of each row
                      int N, int C) {
#pragma omp parallel for schedule(static) if (N > 1)
  for (int r = 0; r < N; r++) {
    const float* src = qkv + static_cast<int64_t>(r) * 3 * C;
    const int64_t dst = slot[r] * kv.slot_stride + static_cast<int64_t>(pos[r]) * C;
    for (int c = 0; c < C; c++) {
      kv.k[dst + c] = src[C + c];
      kv.v[dst + c] = src[2 * C + c];
    }
  }
}

inline void attention(float* out,        // (N, C)
                      const float* qkv,  // (N, 3C): only q is read; k, v come from the cache
                      KvLayerView kv,
                      const int32_t* slot,  // (N)
                      const int32_t* pos,   // (N) the row attends to cache positions 0..pos
                      int N, int C, int n_head, int max_len) {
  const int hd = C / n_head;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
#pragma omp parallel
  {
    std::vector<float> att(max_len);  // one row of scores per thread
#pragma omp for collapse(2) schedule(dynamic, 4)
    for (int r = 0; r < N; r++) {
      for (int h = 0; h < n_head; h++) {
        const float* q = qkv + static_cast<int64_t>(r) * 3 * C + h * hd;
        const float* kb = kv.k + slot[r] * kv.slot_stride + h * hd;
        const float* vb = kv.v + slot[r] * kv.slot_stride + h * hd;
        const int T = pos[r] + 1;
        float maxv = -INFINITY;
        for (int t = 0; t < T; t++) {
          const float* kt = kb + static_cast<int64_t>(t) * C;
          float s = 0.f;
          for (int d = 0; d < hd; d++) s += q[d] * kt[d];
          s *= scale;
          att[t] = s;
          maxv = s > maxv ? s : maxv;
        }
        float sum = 0.f;
        for (int t = 0; t < T; t++) {
          att[t] = std::exp(att[t] - maxv);
          sum += att[t];
        }
        const float inv = 1.f / sum;
        float* o = out + static_cast<int64_t>(r) * C + h * hd;
        for (int d = 0; d < hd; d++) o[d] = 0.f;
        for (int t = 0; t < T; t++) {
          const float p = att[t] * inv;
          const float* vt = vb + static_cast<int64_t>(t) * C;
          for (int d = 0; d < hd; d++) o[d] += p * vt[d];
        }
      }
    }
  }
}

}  // namespace servekit::kernels::ref
