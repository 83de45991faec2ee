// SPDX-License-Identifier: Apache-2.0
#pragma once
// Sequential generation of one request, on the caller's thread: prefill the prompt, then one
// decode step per token (or, without the cache, a full recompute of the sequence per token:
// lesson 1's baseline). Tokens are picked where the engine picks them: on the device for
// Emulated and Cuda (Gpt2::forward_pick), by the host Sampler on Host. The stop rules, streaming
// and timings are RequestState's, the same ones every engine scheduler uses (serve/engine.hpp).
#include <cstdint>
#include <span>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/model/batch.hpp"
#include "servekit/serve/request.hpp"
#include "servekit/serve/request_state.hpp"
#include "servekit/text/tokenizer.hpp"

namespace servekit::serve {

struct GenerateOptions {
  SamplingParams sampling;
  StopParams stop;
  bool use_cache = true;
  int top_logprobs = 0;  // also report this many best alternatives per generated token
  int32_t adapter = -1;  // the model's adapter slot (Gpt2::add_adapter); -1: the base model
  std::shared_ptr<const constrain::Grammar> json_schema;  // structured output (Request's)
};

using GenerateResult = Result;

template <class Model>
GenerateResult generate(Model& model, const text::Gpt2Tokenizer& tok,
                        std::span<const int32_t> prompt, const GenerateOptions& opt,
                        const StreamCallback& on_piece = {}) {
  constexpr int P = Model::Dims::n_positions;
  constexpr int V = Model::Dims::vocab;
  require_tokenizer_covers(tok, V, "generate");
  if (prompt.empty()) fail("generate: the prompt is empty (no tokens)");
  if (static_cast<int>(prompt.size()) > P)
    fail("generate: the prompt has ", prompt.size(), " tokens, more than n_positions = ", P);
  if (opt.top_logprobs < 0 || opt.top_logprobs > V)
    fail("generate: top_logprobs must be in [0, ", V, "], got ", opt.top_logprobs);
  Request req;
  req.sampling = opt.sampling;
  req.stop = opt.stop;
  req.top_logprobs = opt.top_logprobs;
  req.on_piece = on_piece;
  req.json_schema = opt.json_schema;
  RequestState st(0, std::move(req), std::vector<int32_t>(prompt.begin(), prompt.end()), tok, P, V);
  st.scheduled();
  Sampler sampler;
  auto cache = model.make_cache(1, P);
  std::vector<float> logits;
  int n_past = 0;  // tokens whose keys/values are in the cache
  while (!st.finished()) {
    const auto& seq = st.tokens();
    // With the cache only the tokens not yet cached go in; without it, all of them, every step.
    const int start = opt.use_cache ? n_past : 0;
    model::SeqStep step{0, start, static_cast<int32_t>(seq.size()) - start};
    const auto ad =
        opt.adapter >= 0 ? std::span<const int32_t>(&opt.adapter, 1) : std::span<const int32_t>();
    const model::Batch batch{std::span(seq).subspan(start), std::span(&step, 1),
                             model::Logits::Last, ad};
    if constexpr (Model::kDeviceSampling) {  // the engine's way: pick on the device
      RowSampling row = st.sampling_row();
      int32_t id;
      float logprob;
      const bool top = opt.top_logprobs > 0;
      std::span<const uint32_t> mask;
      if (const uint32_t* m = st.next_mask()) row.mask = 0, mask = {m, (V + 31) / 32};
      model.forward_pick(cache, batch, std::span(&row, 1), std::span(&id, 1),
                         std::span(&logprob, 1), top ? &logits : nullptr, mask);
      n_past = static_cast<int>(seq.size());
      st.on_pick(id, logprob, top ? std::span<const float>(logits) : std::span<const float>());
    } else {
      model.forward(cache, batch, logits);
      n_past = static_cast<int>(seq.size());
      st.on_logits(logits, sampler);
    }
  }
  return st.take_result();
}

}  // namespace servekit::serve
