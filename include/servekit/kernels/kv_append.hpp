// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// Writes the K and V thirds of each new token's qkv row into its cache row (converted to the
// cache's element type). One block per token; the cache layout is the Rows functor's business.
#include "servekit/core/symmetric_int8.hpp"
#include "servekit/kernels/common.hpp"

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

template <class T, class Rows>
struct KvAppendParams {
  KvDevice<T, Rows> kv;
  const float* qkv;     // (N, 3C)  q | k | v
  const int32_t* slot;  // (N)
  const int32_t* row;   // (N) cache row of each token
  int N, C;
};

constexpr int kKvAppendPerThread = 16;  // C <= 16 kThreads in registers (2048 at 128 threads)

// One group (a head) of an int8 row: ref::quantize_group's codes and scale, to the bit
// (core/symmetric_int8.hpp's s8_absmax_step, s8_scale and s8_code, written once), so every
// backend caches the same.
__device__ SERVEKIT_SIMT_INLINE float quantize_group(int8_t* q, const float* x, int n) {
  float m = 0.f;
  for (int i = 0; i < n; i++) m = s8_absmax_step(m, fabsf(x[i]));
  const float s = s8_scale(m);
  for (int i = 0; i < n; i++) q[i] = s8_code(x[i], s);
  return s;
}

template <class T, class Rows, int kThreads>
__global__ void __launch_bounds__(kThreads) kv_append_kernel(const KvAppendParams<T, Rows> p) {
  const int r = blockIdx.x;
  const float* src = p.qkv + static_cast<int64_t>(r) * 3 * p.C;
  const int64_t dst = p.kv.rows(p.slot[r], p.row[r]);
  if constexpr (std::is_same_v<T, int8_t>) {  // a thread per group (head), K and V
    const int g = p.kv.scales.group;
    for (int c = threadIdx.x * g; c < p.C; c += kThreads * g) {
      p.kv.scales.k[p.kv.scales.at(dst + c)] = quantize_group(p.kv.k + dst + c, src + p.C + c, g);
      p.kv.scales.v[p.kv.scales.at(dst + c)] =
          quantize_group(p.kv.v + dst + c, src + 2 * p.C + c, g);
    }
  } else {
    if (p.C <= kThreads * kKvAppendPerThread) {
      // The row's k and v read before anything is stored: a store to the cache might alias qkv,
      // so a load after one would wait for it, one round trip per element.
      float k[kKvAppendPerThread], v[kKvAppendPerThread];
#pragma unroll
      for (int i = 0; i < kKvAppendPerThread; i++) {
        const int c = threadIdx.x + kThreads * i;
        if (c < p.C) k[i] = src[p.C + c], v[i] = src[2 * p.C + c];
      }
#pragma unroll
      for (int i = 0; i < kKvAppendPerThread; i++) {
        const int c = threadIdx.x + kThreads * i;
        if (c < p.C) store_f32(p.kv.k[dst + c], k[i]), store_f32(p.kv.v[dst + c], v[i]);
      }
      return;
    }
    for (int c = threadIdx.x; c < p.C; c += kThreads) {
      store_f32(p.kv.k[dst + c], src[p.C + c]);
      store_f32(p.kv.v[dst + c], src[2 * p.C + c]);
    }
  }
}

template <class T, class Rows>
void kv_append(const KvAppendParams<T, Rows>& p, simt::stream_handle stream = nullptr) {
  if (p.N < 1 || p.C < 1) fail("kernels::kv_append: cannot run N = ", p.N, ", C = ", p.C);
  constexpr int kThreads = 128;
  // Per row: its slot and row, its k and v read (f32), written into the cache (T).
  simt::expect_bytes(static_cast<std::size_t>(p.N) *
                     (2 * sizeof(int32_t) + 2 * p.C * (sizeof(float) + sizeof(T))));
  simt::launch(simt::kernel<kv_append_kernel<T, Rows, kThreads>>, dim3(p.N), dim3(kThreads), 0,
               stream, p);
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
