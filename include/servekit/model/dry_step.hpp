// SPDX-License-Identifier: Apache-2.0
#pragma once
// The launches of one decode step of a device-backed model, listed without running a block
// (simt::DryRun): `rows` sequences, each first given `context` tokens by a dry prefill, then
// one new token each. What bench_decode_launches prints and test_decode_grid asserts on.
#include <cstdint>
#include <span>
#include <vector>

#include "servekit/kernels/sampling_args.hpp"
#include "servekit/model/batch.hpp"
#include "servekit/simt/counters.hpp"
#include "servekit/simt/launch.hpp"

namespace servekit::model {

// Model: a Gpt2 on a backend that samples on the device (forward_pick). The cache must hold
// `rows` sequences of context + 1 tokens. adapters: (rows) each sequence's adapter slot (a model
// with LoRA), or empty: none.
template <class Model, class Cache>
std::vector<simt::LaunchRecord> dry_decode_step(Model& model, Cache& cache, int rows, int context,
                                                std::span<const int32_t> adapters = {}) {
  std::vector<int32_t> tokens;
  std::vector<SeqStep> seqs;
  for (int b = 0; b < rows; b++) {
    seqs.push_back({b, 0, context});
    for (int i = 0; i < context; i++) tokens.push_back((b * 131 + i * 7919) % Model::Dims::vocab);
  }
  std::vector<kernels::RowSampling> picks(rows);
  std::vector<int32_t> ids(rows);
  std::vector<float> lp(rows);
  const simt::DryRun dry;
  Batch b{tokens, seqs};
  b.adapters = adapters;
  model.forward_pick(cache, b, picks, ids, lp);  // the context
  tokens.assign(rows, 464);  // a dry run's ids are garbage: decode a fixed token
  for (auto& s : seqs) s = {s.slot, context, 1};
  b.tokens = tokens, b.seqs = seqs;
  simt::LaunchLog log;
  model.forward_pick(cache, b, picks, ids, lp);
  return log.take();
}

}  // namespace servekit::model
