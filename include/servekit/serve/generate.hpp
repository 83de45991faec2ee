// SPDX-License-Identifier: Apache-2.0
#pragma once
// Sequential generation of one request: prefill the prompt, then one decode step per token
// (or, without the cache, a full recompute of the sequence per token: lesson 1's baseline).
// Stop rules: max_new_tokens, EOS, stop strings, the model's context length.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/model/batch.hpp"
#include "servekit/serve/sampling.hpp"
#include "servekit/text/tokenizer.hpp"

namespace servekit::serve {

struct StopParams {
  int max_new_tokens = 16;
  bool stop_at_eos = true;
  int32_t eos_id = -1;  // -1: the tokenizer's <|endoftext|>
  // Generation ends when the text contains one of these; like vLLM, the stop string itself
  // is not part of the returned text.
  std::vector<std::string> stop_strings;
};

struct GenerateOptions {
  SamplingParams sampling;
  StopParams stop;
  bool use_cache = true;
  int top_logprobs = 0;  // also report this many best alternatives per generated token
};

struct TokenLogprob {
  int32_t id;
  float logprob;  // log-softmax of the model's raw logits
};

struct GeneratedToken {
  int32_t id;
  float logprob;
  std::vector<TokenLogprob> top;  // best first, top_logprobs entries
  double ms;                      // wall time of the step that produced it
};

struct GenerateResult {
  std::vector<int32_t> prompt_ids;
  std::vector<GeneratedToken> tokens;
  std::string text;           // the generated text only
  std::string finish_reason;  // "length", "eos", "stop", "context", "cancelled"
  double ttft_ms = 0;         // prefill + first token
  double total_ms = 0;

  std::vector<int32_t> ids() const {
    std::vector<int32_t> v;
    for (const auto& t : tokens) v.push_back(t.id);
    return v;
  }
};

// Called with each piece of text as soon as it is safe to show (complete UTF-8 characters,
// never a prefix of a stop string). Return false to cancel.
using StreamCallback = std::function<bool(std::string_view piece, const GeneratedToken& token)>;

template <class Model>
GenerateResult generate(Model& model, const text::Gpt2Tokenizer& tok,
                        std::span<const int32_t> prompt, const GenerateOptions& opt,
                        const StreamCallback& on_piece = {}) {
  using clock = std::chrono::steady_clock;
  constexpr int P = Model::Dims::n_positions;
  constexpr int V = Model::Dims::vocab;
  if (prompt.empty()) fail("generate: the prompt is empty (no tokens)");
  if (static_cast<int>(prompt.size()) > P)
    fail("generate: the prompt has ", prompt.size(), " tokens, more than n_positions = ", P);
  if (opt.stop.max_new_tokens < 0)
    fail("generate: max_new_tokens must be >= 0, got ", opt.stop.max_new_tokens);
  if (opt.top_logprobs < 0 || opt.top_logprobs > V)
    fail("generate: top_logprobs must be in [0, ", V, "], got ", opt.top_logprobs);
  Sampler sample(opt.sampling);
  const int32_t eos = opt.stop.eos_id >= 0 ? opt.stop.eos_id : tok.eos_id();

  GenerateResult res;
  res.prompt_ids.assign(prompt.begin(), prompt.end());
  auto cache = model.make_cache(1, P);
  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  std::vector<float> logits, logp;
  text::StreamDecoder detok(tok);
  std::size_t shown = 0;  // bytes of res.text already handed to on_piece
  std::size_t longest_stop = 0;
  for (const auto& s : opt.stop.stop_strings) longest_stop = std::max(longest_stop, s.size());

  const auto t_start = clock::now();
  int n_past = 0;  // tokens whose keys/values are in the cache
  while (static_cast<int>(res.tokens.size()) < opt.stop.max_new_tokens) {
    if (static_cast<int>(seq.size()) > P) {
      res.finish_reason = "context";
      break;
    }
    const auto t0 = clock::now();
    // With the cache only the tokens not yet cached go in; without it, all of them, every step.
    const int start = opt.use_cache ? n_past : 0;
    model::SeqStep step{0, start, static_cast<int32_t>(seq.size()) - start};
    model.forward(cache, {std::span(seq).subspan(start), std::span(&step, 1), model::Logits::Last},
                  logits);
    n_past = static_cast<int>(seq.size());

    GeneratedToken g{};
    g.id = sample(logits);
    log_softmax(logits, logp);
    g.logprob = logp[g.id];
    if (opt.top_logprobs > 0) {
      std::vector<int32_t> idx(V);
      for (int i = 0; i < V; i++) idx[i] = i;
      std::partial_sort(idx.begin(), idx.begin() + opt.top_logprobs, idx.end(),
                        [&](int a, int b) { return logp[a] > logp[b]; });
      for (int i = 0; i < opt.top_logprobs; i++) g.top.push_back({idx[i], logp[idx[i]]});
    }
    const auto t1 = clock::now();
    g.ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    if (res.tokens.empty())
      res.ttft_ms = std::chrono::duration<double, std::milli>(t1 - t_start).count();
    res.tokens.push_back(g);
    seq.push_back(g.id);

    if (opt.stop.stop_at_eos && g.id == eos) {
      res.finish_reason = "eos";
      break;
    }
    res.text += detok.push(g.id);
    // A stop string may straddle tokens: search only the tail that could contain a new match.
    std::size_t from =
        res.text.size() > longest_stop + 64 ? res.text.size() - longest_stop - 64 : 0;
    std::optional<std::size_t> cut;
    for (const auto& s : opt.stop.stop_strings) {
      if (s.empty()) continue;
      auto p = res.text.find(s, from);
      if (p != std::string::npos && (!cut || p < *cut)) cut = p;
    }
    if (cut) {
      res.text.resize(std::max(*cut, shown));
      res.finish_reason = "stop";
      if (on_piece && res.text.size() > shown)
        on_piece(std::string_view(res.text).substr(shown), g);
      shown = res.text.size();
      break;
    }
    // Hold back a tail that could still become a stop string.
    std::size_t safe = res.text.size();
    for (const auto& s : opt.stop.stop_strings)
      for (std::size_t k = std::min(s.size() - 1, res.text.size()); k > 0; k--)
        if (res.text.compare(res.text.size() - k, k, s, 0, k) == 0) {
          safe = std::min(safe, res.text.size() - k);
          break;
        }
    if (on_piece && safe > shown) {
      if (!on_piece(std::string_view(res.text).substr(shown, safe - shown), g)) {
        shown = safe;
        res.finish_reason = "cancelled";
        break;
      }
      shown = safe;
    }
  }
  if (res.finish_reason.empty()) res.finish_reason = "length";
  if (res.finish_reason != "stop") {
    res.text += detok.flush();
    if (on_piece && res.text.size() > shown && res.finish_reason != "cancelled" &&
        !res.tokens.empty())
      on_piece(std::string_view(res.text).substr(shown), res.tokens.back());
  }
  res.total_ms = std::chrono::duration<double, std::milli>(clock::now() - t_start).count();
  return res;
}

}  // namespace servekit::serve
