// SPDX-License-Identifier: Apache-2.0
#pragma once
// logits = x @ wte^T on the host. GPT-2 ties the output projection to the token embedding, so
// wte (V, C) is read along C: a tile holds kLmRows rows of x times kLmVocab rows of wte as
// vectors along C, so each wte vector loaded feeds kLmRows FMAs and each x vector kLmVocab.
// Each logit is the same lane-wise chain over C and the same final lane sum whatever tile it
// falls in, so a row's logits do not depend on the other rows of the call.
// The host backend's model holds a packed (C, V) copy of the head instead (Ops<Host>::kHeadCopy),
// which runs twice as fast from batch 8; this kernel needs no copy, and bench_host_linear --head
// times the two side by side.
#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "servekit/core/thread_pool.hpp"
#include "servekit/kernels/host/simd.hpp"

namespace servekit::kernels::host {

// AVX-512: 4 x 4 accumulators; AVX2: 3 x 3 (9 of 16 registers, with the loaded vectors).
constexpr int kLmRows = kRegisters == 32 ? 4 : 3;
constexpr int kLmVocab = kLmRows;

// logits[r, v] for r < R, v < VV of the tile at x (R, C), w (VV, C); ldl: logits' row stride.
template <int R, int VV>
inline void lm_tile(float* logits, int64_t ldl, const float* x, const float* w, int C) {
  vec t[R][VV] = {};
  int c = 0;
  for (; c + kLanes <= C; c += kLanes) {
    vec wv[VV];
    for (int v = 0; v < VV; v++) wv[v] = load(w + static_cast<int64_t>(v) * C + c);
    for (int r = 0; r < R; r++) {
      const vec xv = load(x + static_cast<int64_t>(r) * C + c);
      for (int v = 0; v < VV; v++) t[r][v] = madd(xv, wv[v], t[r][v]);
    }
  }
  for (int r = 0; r < R; r++)
    for (int v = 0; v < VV; v++) {
      float s = lane_sum(t[r][v]);
      for (int cc = c; cc < C; cc++)
        s = madd(x[static_cast<int64_t>(r) * C + cc], w[static_cast<int64_t>(v) * C + cc], s);
      logits[r * ldl + v] = s;
    }
}

template <int VV>
inline void lm_tile_rows(int rows, float* logits, int64_t ldl, const float* x, const float* w,
                         int C) {
  using Fn = void (*)(float*, int64_t, const float*, const float*, int);
  static constexpr auto table = []<int... R>(std::integer_sequence<int, R...>) {
    return std::array<Fn, kLmRows>{&lm_tile<R + 1, VV>...};
  }
  (std::make_integer_sequence<int, kLmRows>{});
  table[rows - 1](logits, ldl, x, w, C);
}

inline void lm_head(float* logits,     // (M, V)
                    const float* x,    // (M, C)
                    const float* wte,  // (V, C)
                    int M, int V, int C) {
  constexpr int VB = 64;  // vocab rows per task: 192 KiB of wte at C = 768, reused from L2
  parallel_for((V + VB - 1) / VB, [&](int blk) {
    const int v0 = blk * VB, v1 = std::min(V, v0 + VB);
    for (int m0 = 0; m0 < M; m0 += kLmRows) {
      const int rows = std::min(kLmRows, M - m0);
      const float* xr = x + static_cast<int64_t>(m0) * C;
      float* lr = logits + static_cast<int64_t>(m0) * V;
      int v = v0;
      for (; v + kLmVocab <= v1; v += kLmVocab)
        lm_tile_rows<kLmVocab>(rows, lr + v, V, xr, wte + static_cast<int64_t>(v) * C, C);
      for (; v < v1; v++)
        lm_tile_rows<1>(rows, lr + v, V, xr, wte + static_cast<int64_t>(v) * C, C);
    }
  });
}

}  // namespace servekit::kernels::host
