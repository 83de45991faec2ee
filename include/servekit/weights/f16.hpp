// SPDX-License-Identifier: Apache-2.0
#pragma once
// fp16 weights: half the bytes of fp32, 11 significant bits, range up to 65504.
#include "servekit/core/dtype.hpp"
#include "servekit/weights/matrix.hpp"
#include "servekit/weights/matrix16.hpp"
#include "servekit/weights/traits.hpp"

namespace servekit::weights {

template <>
struct Matrix<F16> : Matrix16<Matrix<F16>, half_t, float_to_half, half_to_float> {};

template <>
struct Traits<F16> {
  using Element = half_t;
  static constexpr LinearFamily family = LinearFamily::Dense16;
  static auto& codes(Matrix<F16>& m) { return m.data; }
  static const auto& codes(const Matrix<F16>& m) { return m.data; }
};

}  // namespace servekit::weights
