// SPDX-License-Identifier: Apache-2.0
#pragma once
// A request as a user submits it, and its result: the vocabulary every scheduler, the
// sequential generate() and the command line share.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "servekit/constrain/grammar.hpp"
#include "servekit/serve/sampling.hpp"

namespace servekit::serve {

struct StopParams {
  int max_new_tokens = 16;
  bool stop_at_eos = true;
  int32_t eos_id = -1;  // -1: the tokenizer's <|endoftext|>
  // Generation ends when the text contains one of these; like vLLM, the stop string itself
  // is not part of the returned text.
  std::vector<std::string> stop_strings;
};

struct TokenLogprob {
  int32_t id;
  float logprob;  // log-softmax of the model's raw logits
};

// A prompt token after the first, with its log-probability given the tokens before it.
struct PromptToken {
  int32_t id;
  float logprob;
  std::vector<TokenLogprob> top;  // best first, Request::prompt_logprobs entries
};

struct GeneratedToken {
  int32_t id;
  float logprob;
  std::vector<TokenLogprob> top;  // best first, top_logprobs entries
  double ms;                      // since the previous token (the first: since submission)
  bool ends = false;              // the request ended with this token (known when it is streamed)
};

// Called on the engine thread once per generated token (the end-of-text token too), with the
// text that became safe to show with it: complete UTF-8 characters, never a prefix of a stop
// string, so it may be empty while text is held back; the pieces add up to Result::text. Keep
// it cheap; return false to cancel.
using StreamCallback = std::function<bool(std::string_view piece, const GeneratedToken& token)>;

struct Request {
  std::string prompt;               // text, tokenized at submit...
  std::vector<int32_t> prompt_ids;  // ...unless ids are given (then they win)
  SamplingParams sampling;
  StopParams stop;
  std::optional<std::string> adapter;  // LoRA adapter id; none: the base model
  int top_logprobs = 0;                // also report this many best alternatives per token
  // >= 0: also each prompt token's log-probability given the tokens before it, with this many
  // best alternatives at each position (OpenAI's echo with logprobs, TGI's
  // decoder_input_details, an evaluation's log-likelihood). Every prompt position then gets
  // logits, so the prompt is computed whole: no prefix-cache hits. With max_new_tokens 0 the
  // prompt runs and nothing is generated.
  int prompt_logprobs = -1;
  // Structured output: the generated text fits this grammar (constrain::compile_json_schema,
  // or a whole text's: compile_regex, compile_choice, compile_gbnf). The request ends when the
  // JSON is complete (a regex's or grammar's text: with the end-of-text token, where the text
  // may end); with too few tokens left it closes what is open, so that it ends valid whenever
  // the budget allows.
  std::shared_ptr<const constrain::Grammar> json_schema;
  // Lower runs first (vLLM's priority): waiting requests are admitted in priority order and,
  // with the continuous scheduler, a running one of a higher number may be preempted to place
  // this one. Needs EngineOptions::priority_scheduling (otherwise only 0 is accepted). Tokens
  // and logprobs do not depend on it.
  int priority = 0;
  // With the engine's speculation on (EngineOptions::speculative), whether this request takes
  // part; its tokens are the same either way.
  bool speculate = true;
  StreamCallback on_piece;
  // Called on the engine thread once the request has ended, after its handle's Result is set
  // (a server wakes the connection waiting for it). Keep it cheap; it must not throw.
  std::function<void()> on_end;
};

// Why a request ended, as vLLM and OpenAI spell it ("error" carries Result::error).
namespace finish {
inline constexpr std::string_view length = "length", eos = "eos", stop = "stop",
                                  context = "context", cancelled = "cancelled", error = "error";
}

struct Metrics {
  double queue_ms = 0;          // submission -> first scheduled
  double ttft_ms = 0;           // submission -> first token
  double tpot_ms = 0;           // mean gap between tokens after the first
  double e2e_ms = 0;            // submission -> finished
  std::vector<double> gaps_ms;  // each inter-token gap (generated_tokens - 1 of them)
  int prompt_tokens = 0, generated_tokens = 0;
  int preemptions = 0;    // times its cache was taken back and its tokens recomputed
  int cached_tokens = 0;  // prompt tokens found in the prefix cache when first scheduled
  int spec_proposed = 0;  // speculation: tokens proposed for it...
  int spec_accepted = 0;  // ...and accepted (each one a token without a step of its own)
  int forced_tokens = 0;  // jump-forward: tokens its grammar forced, appended without a step
};

struct Result {
  uint64_t id = 0;
  std::vector<int32_t> prompt_ids;
  std::vector<GeneratedToken> tokens;
  // Request::prompt_logprobs >= 0: one per prompt token after the first, in order.
  std::vector<PromptToken> prompt_logprobs;
  std::string text;           // the generated text only
  std::string finish_reason;  // one of serve::finish
  std::string error;          // finish_reason "error": what went wrong
  Metrics metrics;

  std::vector<int32_t> ids() const {
    std::vector<int32_t> v;
    v.reserve(tokens.size());
    for (const auto& t : tokens) v.push_back(t.id);
    return v;
  }
};

}  // namespace servekit::serve
