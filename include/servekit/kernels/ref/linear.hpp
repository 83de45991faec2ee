// SPDX-License-Identifier: Apache-2.0
#pragma once
// Linear layers dispatched on the weight format: one overload per weights::Matrix
// specialisation, each fusing its dequantisation into the matmul.
#include "servekit/kernels/ref/matmul.hpp"
#include "servekit/weights/f32.hpp"

namespace servekit::kernels::ref {

template <Epilogue E>
void linear(float* out,                              // (M, N)
            const float* x,                          // (M, K)
            const weights::Matrix<weights::F32>& W,  // (K, N)
            const float* b,                          // (N)
            int M) {
  matmul<E>(out, x, W.data.data(), b, M, W.rows, W.cols);
}

}  // namespace servekit::kernels::ref
