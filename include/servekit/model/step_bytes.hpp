// SPDX-License-Identifier: Apache-2.0
#pragma once
// The bytes a decode step must move at least, the floor that a backend's launches are measured
// against (bench_decode_launches, test_decode_grid): each weight once; the KV rows attended to
// (f32 K and V, the context and the new row) and written; per layer and row ~26 C floats of
// activations between the kernels; the logits written and read back by the sampler.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "servekit/lora/adapter.hpp"

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

// The bytes a decode step's LoRA launches must move at least (bench_decode_launches --lora,
// test_decode_grid): per linear, each adapter the rows use read once (A and B), each adapted
// row's x read and its delta written once. adapters: by slot; slots: (rows) each row's slot or
// -1; element: the bytes of an adapter's value as the model stores it (4, or 2 for 16-bit
// adapters: Gpt2::LoraFormat).
template <class Dims>
double lora_step_bytes(std::span<const lora::Adapter> adapters, std::span<const int32_t> slots,
                       double element = 4) {
  std::vector<int32_t> distinct(slots.begin(), slots.end());
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  double bytes = 0;
  for (int l = 0; l < Dims::n_layer; l++)
    for (int t = 0; t < lora::kTargets; t++) {
      const auto target = static_cast<lora::Target>(t);
      const auto [K, N] = lora::target_shape(target, Dims::n_embd);
      for (int32_t a : distinct)
        if (a >= 0)
          if (const auto* q = adapters[a].find(l, target)) bytes += element * q->rank * (K + N);
      for (int32_t a : slots)
        if (a >= 0 && adapters[a].find(l, target)) bytes += 4.0 * (K + N);
    }
  return bytes;
}

}  // namespace servekit::model
