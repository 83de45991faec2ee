// SPDX-License-Identifier: Apache-2.0
#pragma once
// DeviceMatrix<Fmt>: a weights::Matrix<Fmt> uploaded to device memory, field for field, so the
// device kernels read it exactly as the emulator reads the Matrix (same member names, same
// (K, N) layout). The primary template covers the dense families (Traits<Fmt>::codes is the
// one (K, N) array, `data`: f32, f16, bf16); a format with more arrays (U8ZeroPoint: q, scale,
// zero; W8A8: q, scale) specialises it with the same shape: its Matrix's arrays as
// simt::DeviceVector, its integers copied, bytes() and state_bytes(), and a static upload(const
// Matrix<Fmt>&).
#include <cstddef>
#include <span>
#include <type_traits>

#include "servekit/simt/memory.hpp"
#include "servekit/weights/matrix.hpp"
#include "servekit/weights/traits.hpp"
#include "servekit/weights/u8_zero_point.hpp"
#include "servekit/weights/w8a8.hpp"

namespace servekit::weights {

template <WeightFormat Fmt>
struct DeviceMatrix {
  using Format = Fmt;
  static_assert(Traits<Fmt>::family != LinearFamily::ZeroPoint8,
                "servekit: a format with quantization state specialises DeviceMatrix");
  static_assert(Traits<Fmt>::family != LinearFamily::Int8,
                "servekit: a format with quantization state specialises DeviceMatrix");
  using Elem = typename Traits<Fmt>::Element;
  simt::DeviceVector<Elem> data;  // (K, N)
  int rows = 0;                   // K: input features
  int cols = 0;                   // N: output features

  static DeviceMatrix upload(const Matrix<Fmt>& m) {
    DeviceMatrix d;
    d.data.assign(std::span<const Elem>(Traits<Fmt>::codes(m)));
    d.rows = m.rows, d.cols = m.cols;
    return d;
  }
  std::size_t bytes() const { return data.size() * sizeof(Elem); }
  std::size_t state_bytes() const { return 0; }
};

// uint8 zero-point: the quantized bytes and each group's (scale, min), as in Matrix.
template <Granularity G>
struct DeviceMatrix<U8ZeroPoint<G>> {
  using Format = U8ZeroPoint<G>;
  simt::DeviceVector<uint8_t> q;    // (K, N)
  simt::DeviceVector<float> scale;  // (K / group_rows, state_cols)
  simt::DeviceVector<float> zero;   // (K / group_rows, state_cols): each group's min
  int rows = 0, cols = 0, group_rows = 0, state_cols = 0;

  static DeviceMatrix upload(const Matrix<Format>& m) {
    DeviceMatrix d;
    d.q.assign(std::span<const uint8_t>(m.q));
    d.scale.assign(std::span<const float>(m.scale));
    d.zero.assign(std::span<const float>(m.zero));
    d.rows = m.rows, d.cols = m.cols, d.group_rows = m.group_rows, d.state_cols = m.state_cols;
    return d;
  }
  std::size_t bytes() const { return q.size() + state_bytes(); }
  std::size_t state_bytes() const { return (scale.size() + zero.size()) * sizeof(float); }
};

// W8A8: the int8 codes (K, N) and each group's scale, as in Matrix.
template <Granularity G>
struct DeviceMatrix<W8A8<G>> {
  using Format = W8A8<G>;
  simt::DeviceVector<int8_t> q;     // (K, N)
  simt::DeviceVector<float> scale;  // (K / group_rows, state_cols)
  int rows = 0, cols = 0, group_rows = 0, state_cols = 0;

  static DeviceMatrix upload(const Matrix<Format>& m) {
    DeviceMatrix d;
    d.q.assign(std::span<const int8_t>(m.q));
    d.scale.assign(std::span<const float>(m.scale));
    d.rows = m.rows, d.cols = m.cols, d.group_rows = m.group_rows, d.state_cols = m.state_cols;
    return d;
  }
  std::size_t bytes() const { return q.size() + state_bytes(); }
  std::size_t state_bytes() const { return scale.size() * sizeof(float); }
};

}  // namespace servekit::weights
