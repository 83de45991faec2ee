// SPDX-License-Identifier: Apache-2.0
#pragma once
// GELU, tanh approximation (HF "gelu_new"): GPT-2 was trained with it, so the exact erf form
// would shift every logit.
#include <cmath>

namespace servekit::kernels::ref {

inline float gelu_tanh(float x) {
  constexpr float k = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.f + std::tanh(k * (x + 0.044715f * x * x * x)));
}

}  // namespace servekit::kernels::ref
