// SPDX-License-Identifier: Apache-2.0
#pragma once
// Linear layers on the host, one overload set for every weight format: each format's matrix is
// viewed as the (K, N) elements the matmul streams (host/matmul.hpp widens them as it loads),
// so no dequantised copy of a matrix exists and a decode step reads the compact storage only.
#include <cstdint>

#include "servekit/kernels/host/matmul.hpp"
#include "servekit/kernels/host/packed.hpp"
#include "servekit/weights/formats.hpp"

namespace servekit::kernels::host {

inline WeightView<float> view(const weights::Matrix<weights::F32>& W) {
  return {W.data.data(), W.rows, W.cols, W.rows};
}
template <class Fmt>
requires std::is_same_v<Fmt, weights::F16> || std::is_same_v<Fmt, weights::BF16>
auto view(const weights::Matrix<Fmt>& W) {
  using T = typename decltype(W.data)::value_type;
  return WeightView<T>{W.data.data(), W.rows, W.cols, W.rows};
}
template <weights::Granularity G>
WeightView<uint8_t> view(const weights::Matrix<weights::U8ZeroPoint<G>>& W) {
  return {W.q.data(), W.rows, W.cols, W.group_rows, W.scale.data(), W.zero.data(), W.state_cols};
}

// Any of them packed in strips (host/packed.hpp): the host backend's resident form.
template <class Mat>
auto view(const Packed<Mat>& P) {
  auto v = view(P.strips());
  v.packed = true;
  return v;
}

template <Epilogue E, class Mat>
void linear(float* out,      // (M, N)
            const float* x,  // (M, K)
            const Mat& W,    // (K, N)
            const float* b,  // (N)
            int M,
            const float* add = nullptr) {  // (M, N) added before the epilogue
  matmul<E>(out, x, view(W), b, M, add);
}

}  // namespace servekit::kernels::host
