// SPDX-License-Identifier: Apache-2.0
#pragma once
// Ops<Backend>: the operations the decoder is written in. The decoder (model/gpt2.hpp) is the
// same for every backend; each backend specialises Ops in its own header.
#include "servekit/backend/policy.hpp"

namespace servekit::backend {

template <Backend B>
struct Ops {
  static_assert(sizeof(B) == 0, "servekit: no backend::Ops specialisation for this backend");
};

// Ops that want the model's output projection as a resident copy in the weight format even in
// f32 (static constexpr bool kHeadCopy = true), not the tied wte read by their lm_head.
template <class O>
concept CopiesHead = O::kHeadCopy;

}  // namespace servekit::backend
