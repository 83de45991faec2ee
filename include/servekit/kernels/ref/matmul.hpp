// SPDX-License-Identifier: Apache-2.0
#pragma once
// out = epilogue(x @ W + bias) for fp32 W stored (K, N). Blocked so that a block of output
// columns of a few rows stays in L1 while W streams through once per row block: decode
// (M = 1) is bandwidth-bound on W, prefill reuses each W row for MB rows of x.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "servekit/core/thread_pool.hpp"
#include "servekit/kernels/ref/gelu.hpp"

namespace servekit::kernels::ref {

enum class Epilogue {
  Store,     // out = x @ W + b
  Gelu,      // out = gelu_tanh(x @ W + b)
  Residual,  // out += x @ W + b   (the residual stream update)
};

// add: an addend applied before the epilogue (a LoRA delta), or nullptr.
template <Epilogue E>
inline void store_row(float* o, const float* acc, const float* b, const float* add, int cols) {
  for (int c = 0; c < cols; c++) {
    float v = acc[c] + (b ? b[c] : 0.f);
    if (add) v += add[c];
    if constexpr (E == Epilogue::Store) o[c] = v;
    if constexpr (E == Epilogue::Gelu) o[c] = gelu_tanh(v);
    if constexpr (E == Epilogue::Residual) o[c] += v;
  }
}

// Per-thread scratch that outlives a call: a decode step runs ~50 linears, whose partial sums
// should not be heap-allocated each time. Tag keeps the users of one thread apart (a caller's
// buffer stays live while its parallel region uses the workers' ones).
template <int Tag>
float* thread_scratch(std::size_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

// The decode shape (a few rows of x): bandwidth-bound on W. Each thread owns a band of output
// columns [n0, n1) and streams W's rows through it in order, k = 0 .. K-1; band(n0, n1, acc)
// writes the band's sums into acc (M, N), whose band it gets zeroed. Cutting columns, never K,
// keeps every output's sum in the same order as the prefill path's whatever M and the thread
// count, so a row's result does not depend on what else shares the step: the engine's batches
// are bitwise batch-invariant on the host (tests/test_host_matmul.cpp checks every format).
template <Epilogue E, class Band>
void banded_rows(float* out, const float* b, const float* add, int M, int N, const Band& band) {
  constexpr int kMinCols = 64;  // runs of >= 256 B of each W row: the prefetcher still streams
  const int n_bands = std::max(1, std::min(host_threads(), N / kMinCols));
  float* acc = thread_scratch<0>(static_cast<std::size_t>(M) * N);  // (M, N)
  parallel_for(
      n_bands,
      [&](int i) {
        // Band edges on 16-float (64 B) lines, so two threads never share a cache line of acc.
        auto edge = [&](int j) {
          return j == n_bands ? N : static_cast<int>(static_cast<int64_t>(N) * j / n_bands) & ~15;
        };
        const int n0 = edge(i), n1 = edge(i + 1);
        if (n1 <= n0) return;
        for (int r = 0; r < M; r++)
          std::fill(acc + static_cast<int64_t>(r) * N + n0, acc + static_cast<int64_t>(r) * N + n1,
                    0.f);
        band(n0, n1, acc);
        for (int r = 0; r < M; r++)
          store_row<E>(out + static_cast<int64_t>(r) * N + n0,
                       acc + static_cast<int64_t>(r) * N + n0, b ? b + n0 : nullptr,
                       add ? add + static_cast<int64_t>(r) * N + n0 : nullptr, n1 - n0);
      },
      1);
}

// The prefill shape: one task per (MB, NB) block of the output, f(m0, rows, n0, cols).
template <int MB, int NB, class F>
void parallel_blocks(int M, int N, const F& f) {
  const int n_blocks = (N + NB - 1) / NB, m_blocks = (M + MB - 1) / MB;
  parallel_for(
      m_blocks * n_blocks,
      [&](int blk) {
        const int m0 = blk / n_blocks * MB, n0 = blk % n_blocks * NB;
        f(m0, std::min(MB, M - m0), n0, std::min(NB, N - n0));
      },
      1);
}

// Prefill micro-kernel: an MR x NR tile of the output held in registers while a K band
// streams through, so each W element loaded feeds MR FMAs and each x element NR. acc holds the
// running sums of the band before (ld = NB): the K bands of a panel accumulate into it.
template <int MR, int NR>
inline void matmul_tile(float* acc, int ld, const float* x, int ldx, const float* W, int N, int k0,
                        int k1, int rows, int cols) {
  float t[MR][NR];
  if (rows == MR && cols == NR) {  // the common, full tile: no bounds in the hot loop
    for (int r = 0; r < MR; r++)
      for (int c = 0; c < NR; c++) t[r][c] = acc[r * ld + c];
    for (int k = k0; k < k1; k++) {
      const float* w = W + static_cast<int64_t>(k) * N;
      for (int r = 0; r < MR; r++) {
        const float xv = x[static_cast<int64_t>(r) * ldx + k];
        for (int c = 0; c < NR; c++) t[r][c] += xv * w[c];
      }
    }
    for (int r = 0; r < MR; r++)
      for (int c = 0; c < NR; c++) acc[r * ld + c] = t[r][c];
    return;
  }
  for (int r = 0; r < MR; r++)
    for (int c = 0; c < NR; c++) t[r][c] = r < rows && c < cols ? acc[r * ld + c] : 0.f;
  for (int k = k0; k < k1; k++) {
    const float* w = W + static_cast<int64_t>(k) * N;
    float wv[NR];
    for (int c = 0; c < NR; c++) wv[c] = c < cols ? w[c] : 0.f;
    for (int r = 0; r < MR; r++) {
      const float xv = r < rows ? x[static_cast<int64_t>(r) * ldx + k] : 0.f;
      for (int c = 0; c < NR; c++) t[r][c] += xv * wv[c];
    }
  }
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) acc[r * ld + c] = t[r][c];
}

template <Epilogue E>
void matmul(float* out,      // (M, N)
            const float* x,  // (M, K)
            const float* W,  // (K, N)
            const float* b,  // (N) or nullptr
            int M, int K, int N,
            const float* add = nullptr) {  // (M, N) added before the epilogue, or nullptr
  if (M >= 8) {
    // Batched decode and prefill: each task owns a panel of NB output columns and walks W in
    // (KB, NB) blocks that stay in L2 while every row tile of x reuses them; rows of W are read
    // in 1 KiB runs, so the prefetcher keeps up even when W is far larger than the caches.
    // Inside a block, 8 x 32 register tiles (measured best of 4..16 x 32..64 on AVX-512).
    constexpr int MR = 8, NR = 32, NB = 256, KB = 256;
    const int n_panels = (N + NB - 1) / NB;
    parallel_for(
        n_panels,
        [&](int p) {
          float* acc = thread_scratch<1>(static_cast<std::size_t>(M) * NB);  // (M, NB) panel sums
          const int n0 = p * NB, ncols = std::min(NB, N - n0);
          std::fill(acc, acc + static_cast<std::size_t>(M) * NB, 0.f);
          for (int k0 = 0; k0 < K; k0 += KB) {
            const int k1 = std::min(K, k0 + KB);
            for (int m0 = 0; m0 < M; m0 += MR)
              for (int c0 = 0; c0 < ncols; c0 += NR)
                matmul_tile<MR, NR>(acc + static_cast<std::size_t>(m0) * NB + c0, NB,
                                    x + static_cast<int64_t>(m0) * K, K, W + n0 + c0, N, k0, k1,
                                    std::min(MR, M - m0), std::min(NR, ncols - c0));
          }
          for (int r = 0; r < M; r++)
            store_row<E>(out + static_cast<int64_t>(r) * N + n0,
                         acc + static_cast<std::size_t>(r) * NB, b ? b + n0 : nullptr,
                         add ? add + static_cast<int64_t>(r) * N + n0 : nullptr, ncols);
        },
        1);
    return;
  }
  // Decode (a few rows): bandwidth-bound on W.
  banded_rows<E>(out, b, add, M, N, [&](int n0, int n1, float* acc) {
    for (int k = 0; k < K; k++) {
      const float* w = W + static_cast<int64_t>(k) * N;
      for (int r = 0; r < M; r++) {
        const float xv = x[static_cast<int64_t>(r) * K + k];
        float* a = acc + static_cast<int64_t>(r) * N;
#pragma omp simd
        for (int c = n0; c < n1; c++) a[c] += xv * w[c];
      }
    }
  });
}

}  // namespace servekit::kernels::ref
