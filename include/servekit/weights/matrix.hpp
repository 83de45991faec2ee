// SPDX-License-Identifier: Apache-2.0
#pragma once
// A linear layer's weight matrix in some storage format. Matrices keep HF Conv1D's layout,
// (K, N) = (in, out) row-major, so a decode step streams each row once.
#include "servekit/weights/policy.hpp"

namespace servekit::weights {

template <WeightFormat Fmt>
struct Matrix {
  static_assert(sizeof(Fmt) == 0, "servekit: no weights::Matrix specialisation for this format");
};

}  // namespace servekit::weights
