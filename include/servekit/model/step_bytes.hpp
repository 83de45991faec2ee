// SPDX-License-Identifier: Apache-2.0
#pragma once
// The bytes a decode step must move at least, the floor that a backend's launches are measured
// against (bench_decode_launches, test_decode_grid): each weight once; the KV rows attended to
// (f32 K and V, the context and the new row) and written; per layer and row ~26 C floats of
// activations between the kernels; the logits written and read back by the sampler.
#include <cstddef>

namespace servekit::model {

struct DecodeStepBytes {
  double weights, kv, act;
  double must() const { return weights + kv + act; }
};

// rows sequences with `context` tokens each, one new token each; weight_bytes as
// Gpt2::weight_bytes().
template <class Dims>
DecodeStepBytes decode_step_bytes(std::size_t weight_bytes, int rows, int context) {
  constexpr int L = Dims::n_layer, C = Dims::n_embd, V = Dims::vocab;
  return {static_cast<double>(weight_bytes),
          static_cast<double>(rows) * (context + 2) * L * 2 * C * sizeof(float),
          static_cast<double>(rows) * (L * 26.0 * C + 2.0 * V) * sizeof(float)};
}

}  // namespace servekit::model
