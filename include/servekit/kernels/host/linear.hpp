// SPDX-License-Identifier: Apache-2.0
#pragma once
// Linear layers on the host, one overload set for every weight format: each format's matrix is
// viewed as the (K, N) elements the matmul streams (host/matmul.hpp widens them as it loads),
// so no dequantised copy of a matrix exists and a decode step reads the compact storage only.
#include <cstdint>
#include <type_traits>

#include "servekit/kernels/host/linear_i8.hpp"
#include "servekit/kernels/host/matmul.hpp"
#include "servekit/kernels/host/packed.hpp"
#include "servekit/weights/formats.hpp"

namespace servekit::kernels::host {

// A Matrix as its family's view (weights/traits.hpp): the dense families stream their codes
// as they are; zero-point uint8 streams bytes with each group's (scale, min).
template <weights::WeightFormat Fmt>
auto view(const weights::Matrix<Fmt>& W) {
  using Tr = weights::Traits<Fmt>;
  using T = typename Tr::Element;
  if constexpr (Tr::family == weights::LinearFamily::ZeroPoint8)
    return WeightView<T>{W.q.data(),     W.rows,        W.cols,      W.group_rows,
                         W.scale.data(), W.zero.data(), W.state_cols};
  else
    return WeightView<T>{Tr::codes(W).data(), W.rows, W.cols, W.rows};
}

// Any of them packed in strips (host/packed.hpp): the host backend's resident form.
template <class Mat>
auto view(const Packed<Mat>& P) {
  auto v = view(P.strips());
  v.packed = true;
  return v;
}

// W8A8 packed (pack_quads) as host/linear_i8.hpp reads it.
template <weights::Granularity G>
I8View i8_view(const Packed<weights::Matrix<weights::W8A8<G>>>& P) {
  const auto& m = P.strips();
  return {m.q.data(),        m.rows,      m.cols, m.group_rows, m.scale.data(),
          P.colsum().data(), m.state_cols};
}

// The same with a row addend computed as the tiles store (host/lora.hpp's fused expand).
template <Epilogue E, class Mat>
void linear(float* out, const float* x, const Mat& W, const float* b, int M,
            const RowAddend auto& add) {
  if constexpr (weights::family_of<Mat> != weights::LinearFamily::Int8) {
    matmul<E>(out, x, view(W), b, M, add);
  } else {
    // Packing per call would cost a step more than its linear: the caller packs once.
    static_assert(!std::is_same_v<Mat, weights::Matrix<weights::format_of<Mat>>>,
                  "the host's integer kernels read W8A8 packed: pass Packed<Matrix>::pack(W)");
    linear_i8<E>(out, x, i8_view(W), b, M, add);
  }
}

template <Epilogue E, class Mat>
void linear(float* out,      // (M, N)
            const float* x,  // (M, K)
            const Mat& W,    // (K, N)
            const float* b,  // (N)
            int M,
            const float* add = nullptr) {  // (M, N) added before the epilogue
  linear<E>(out, x, W, b, M, DenseAdd{add, W.cols});
}

}  // namespace servekit::kernels::host
