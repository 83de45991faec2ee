// SPDX-License-Identifier: Apache-2.0
#pragma once
// New tokens' keys and values into the KV cache on the host: kernels/ref's kv_append, with an
// f16 cache's rows narrowed eight at a time (host/simd.hpp's narrow_row, the same bits as
// float_to_half). The scalar conversion was 4% of an AVX2 prefill step; f32 rows are copies and
// int8 rows are ref's quantisation, whose absmax and rounding every backend shares.
#include <cstdint>
#include <type_traits>

#include "servekit/core/dtype.hpp"
#include "servekit/core/thread_pool.hpp"
#include "servekit/kernels/host/simd.hpp"
#include "servekit/kernels/ref/attention.hpp"

namespace servekit::kernels::host {

template <ref::KvRowView View>
void kv_append(const View& kv,
               const float* qkv,     // (N, 3C)  q | k | v
               const int32_t* slot,  // (N)
               const int32_t* row,   // (N) cache row of each token
               int N, int C) {
  if constexpr (std::is_same_v<std::remove_cv_t<typename View::elem_type>, half_t>) {
    parallel_for(N, [&](int r) {
      const float* src = qkv + static_cast<int64_t>(r) * 3 * C;
      const int64_t dst = kv.offset(slot[r], row[r]);
      narrow_row(kv.k + dst, src + C, C);
      narrow_row(kv.v + dst, src + 2 * C, C);
    });
  } else {
    ref::kv_append(kv, qkv, slot, row, N, C);
  }
}

}  // namespace servekit::kernels::host
