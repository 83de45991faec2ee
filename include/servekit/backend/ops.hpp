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

// Ops whose linear can share K among blocks for a launch of few rows (split-K), given a scratch
// the decoder owns (kernels::SplitK). O::split_k_size<Mat>(M, K, N): the partial floats and the
// counters (kernels::SplitSize) launches of up to M rows over a (K, N) matrix Mat need for it;
// no floats if they never split.
template <class O, class Mat>
concept SplitsK = requires {
  O::template split_k_size<Mat>(1, 1, 1);
};

// A backend whose linear adds the LoRA delta of dispatch Policy itself, as it stores its rows
// (Ops::linear_lora), instead of taking a delta matrix its lora op filled.
template <class O, class Policy>
concept FusesLora = requires {
  requires O::template kFusesLora<Policy>;
};

}  // namespace servekit::backend
