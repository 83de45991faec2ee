// SPDX-License-Identifier: Apache-2.0
#pragma once
// bf16 weights: half the bytes of fp32 with fp32's range, 8 significant bits.
#include "servekit/core/dtype.hpp"
#include "servekit/weights/matrix.hpp"
#include "servekit/weights/matrix16.hpp"
#include "servekit/weights/traits.hpp"

namespace servekit::weights {

template <>
struct Matrix<BF16> : Matrix16<Matrix<BF16>, bf16_t, float_to_bf16, bf16_to_float> {};

template <>
struct Traits<BF16> {
  using Element = bf16_t;
  static constexpr LinearFamily family = LinearFamily::Dense16;
  static auto& codes(Matrix<BF16>& m) { return m.data; }
  static const auto& codes(const Matrix<BF16>& m) { return m.data; }
};

}  // namespace servekit::weights
