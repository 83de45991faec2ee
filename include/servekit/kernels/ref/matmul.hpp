// SPDX-License-Identifier: Apache-2.0
#pragma once
// out = epilogue(x @ W + bias) for fp32 W stored (K, N): the oracle. One plain loop per
// output, k in order; the host's fast path (kernels/host/matmul.hpp) is tested against it.
#include <cstdint>

#include "servekit/kernels/epilogue.hpp"
#include "servekit/kernels/ref/gelu.hpp"

namespace servekit::kernels::ref {

using kernels::Epilogue;

// o (op)= acc + b + add: how each epilogue writes one output.
template <Epilogue E>
inline void store_out(float& o, float acc, float b, float add) {
  const float v = acc + b + add;
  if constexpr (E == Epilogue::Store) o = v;
  if constexpr (E == Epilogue::Gelu) o = gelu_tanh(v);
  if constexpr (E == Epilogue::Residual) o += v;
}

template <Epilogue E>
void matmul(float* out,      // (M, N)
            const float* x,  // (M, K)
            const float* W,  // (K, N)
            const float* b,  // (N) or nullptr
            int M, int K, int N,
            const float* add = nullptr) {  // (M, N) added before the epilogue, or nullptr
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      float acc = 0.f;
      for (int k = 0; k < K; k++)
        acc += x[static_cast<int64_t>(m) * K + k] * W[static_cast<int64_t>(k) * N + n];
      const int64_t i = static_cast<int64_t>(m) * N + n;
      store_out<E>(out[i], acc, b ? b[n] : 0.f, add ? add[i] : 0.f);
    }
}

}  // namespace servekit::kernels::ref
