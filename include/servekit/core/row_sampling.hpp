// SPDX-License-Identifier: Apache-2.0
#pragma once
// One row's draw, as a request sets it and a sampler (the host's serve::Sampler or the device's
// kernels/sampling.hpp) reads it. Here, below both, so that request state, the step plan and the
// kernels name one type and none of them includes another's header for it.
#include <cmath>
#include <cstdint>

#include "servekit/core/error.hpp"

namespace servekit {

// A seeded request's n-th token draws sample_uniform(seed, n) whatever row of whatever batch
// it sits in.
struct RowSampling {
  uint64_t seed = 0;      // the request's random stream
  uint64_t index = 0;     // the draw's number within it (the request's generated tokens so far)
  float temperature = 0;  // > 0; 0: greedy (the argmax, ties to the lowest index)
  float top_p = 1;        // (0, 1]; 1: off
  int32_t top_k = 0;      // 0 or >= V: off
  int32_t mask = -1;  // which of the step's token masks applies (kernels/token_mask.hpp); -1: none
};

// Host-side check of one row's parameters, before they go to a sampler.
inline void check_row(const RowSampling& r, int m) {
  if (!(r.temperature >= 0.f) || std::isinf(r.temperature))
    fail("kernels::sample: row ", m, ": temperature must be > 0 (or 0 for greedy), got ",
         r.temperature);
  if (r.top_k < 0) fail("kernels::sample: row ", m, ": top_k must be >= 0 (0: off), got ", r.top_k);
  if (!(r.top_p > 0.f && r.top_p <= 1.f))
    fail("kernels::sample: row ", m, ": top_p must be in (0, 1] (1: off), got ", r.top_p);
}

}  // namespace servekit
