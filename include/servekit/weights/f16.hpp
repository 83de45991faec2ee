// SPDX-License-Identifier: Apache-2.0
#pragma once
// fp16 weights: half the bytes of fp32, 11 significant bits, range up to 65504.
#include "servekit/core/dtype.hpp"
#include "servekit/weights/matrix.hpp"
#include "servekit/weights/matrix16.hpp"

namespace servekit::weights {

template <>
struct Matrix<F16> : Matrix16<Matrix<F16>, half_t, float_to_half, half_to_float> {};

}  // namespace servekit::weights
