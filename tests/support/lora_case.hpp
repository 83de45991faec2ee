// SPDX-License-Identifier: Apache-2.0
#pragma once
// A composition's LoRA choices as one type, for the TEMPLATE_TEST_CASEs that run over them
// (the dispatch policy, the weight format, which decides the adapters' storage, and the dims).
#include "servekit/core/dims.hpp"

namespace servekit::test {

template <class Policy, class W, class D = dims::TinyA>
struct LoraCase {
  using Lora = Policy;
  using Weights = W;
  using Dims = D;
};

}  // namespace servekit::test
