// SPDX-License-Identifier: Apache-2.0
#pragma once
// Causal self-attention over a KV cache. Each new token's keys and values are appended to its
// sequence's cache rows first; then each query row attends to every cached row up to and
// including its own position. Prefill (many rows per sequence) and decode (one row) are the
// same loop.
#include <cmath>
#include <concepts>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "servekit/core/dtype.hpp"
#include "servekit/core/symmetric_int8.hpp"
#include "servekit/core/thread_pool.hpp"
#include "servekit/kv/view.hpp"

namespace servekit::kernels::ref {

// The cache is any kv view (contiguous or paged; f32, f16, or int8 with a scale per row and
// head) that maps (slot, row) to an offset, and a sequence's rows may start after some left
// padding.

inline float load_f32(float x) {
  return x;
}
inline float load_f32(half_t x) {
  return half_to_float(x);
}
inline void store_from_f32(float& d, float x) {
  d = x;
}
inline void store_from_f32(half_t& d, float x) {
  d = float_to_half(x);
}
inline float load_f32(int8_t x) {  // an int8 cache's code: times its row's scale (kv_scale)
  return static_cast<float>(x);
}

template <class View>
inline constexpr bool kInt8Kv = std::is_same_v<std::remove_cv_t<typename View::elem_type>, int8_t>;

// The scale of the K (or V) features at element offset `at` of an int8 cache; 1 otherwise.
template <class View>
float kv_scale(const View& kv, int64_t at, bool value) {
  if constexpr (kInt8Kv<View>)
    return (value ? kv.scales.v : kv.scales.k)[kv.scales.at(at)];
  else
    return 1.f;
}

// One group of an int8 cache row: symmetric int8 (core/symmetric_int8.hpp).
inline float quantize_group(int8_t* q, const float* x, int n) {
  return quantize_s8(q, x, n);
}

template <class View>
concept KvRowView = requires(const View& v, int32_t s, int32_t t) {
  typename View::elem_type;
  { v.offset(s, t) } -> std::convertible_to<int64_t>;
};

// Writes the K and V parts of qkv into cache row row[r] of slot slot[r] (converted to the
// cache's element type).
template <KvRowView View>
void kv_append(const View& kv,
               const float* qkv,     // (N, 3C)  q | k | v
               const int32_t* slot,  // (N)
               const int32_t* row,   // (N) cache row of each token
               int N, int C) {
  parallel_for(N, [&](int r) {
    const float* src = qkv + static_cast<int64_t>(r) * 3 * C;
    const int64_t dst = kv.offset(slot[r], row[r]);
    if constexpr (kInt8Kv<View>) {  // a scale per group (head) of each row, for K and V
      const int g = kv.scales.group;
      for (int c = 0; c < C; c += g) {
        kv.scales.k[kv.scales.at(dst + c)] = quantize_group(kv.k + dst + c, src + C + c, g);
        kv.scales.v[kv.scales.at(dst + c)] = quantize_group(kv.v + dst + c, src + 2 * C + c, g);
      }
    } else {
      for (int c = 0; c < C; c++) {
        store_from_f32(kv.k[dst + c], src[C + c]);
        store_from_f32(kv.v[dst + c], src[2 * C + c]);
      }
    }
  });
}

// Each query row r attends to cache rows first[r]..row[r] of its slot: first[r] > 0 skips a
// left-padded sequence's pad rows, which is what HF's attention_mask does. Rows are looked up
// per key (a paged block boundary may fall anywhere); scores and sums stay fp32.
template <KvRowView View>
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
        float maxv = -INFINITY;
        for (int t = t0; t < T; t++) {
          const int64_t at = kv.offset(slot[r], t) + h * hd;
          const auto* kt = kv.k + at;
          float s = 0.f;
          for (int d = 0; d < hd; d++) s += q[d] * load_f32(kt[d]);
          s *= scale * kv_scale(kv, at, false);
          att[t] = s;
          maxv = s > maxv ? s : maxv;
        }
        float sum = 0.f;
        for (int t = t0; t < T; t++) {
          att[t] = std::exp(att[t] - maxv);
          sum += att[t];
        }
        const float inv = 1.f / sum;
        float* o = out + static_cast<int64_t>(r) * C + h * hd;
        for (int d = 0; d < hd; d++) o[d] = 0.f;
        for (int t = t0; t < T; t++) {
          const int64_t at = kv.offset(slot[r], t) + h * hd;
          const float p = att[t] * inv * kv_scale(kv, at, true);
          const auto* vt = kv.v + at;
          for (int d = 0; d < hd; d++) o[d] += p * load_f32(vt[d]);
        }
      },
      4);
}

}  // namespace servekit::kernels::ref
