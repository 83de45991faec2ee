// SPDX-License-Identifier: Apache-2.0
#pragma once
// `servekit generate`: one prompt through the composition main() picked, printed as it comes
// (or one JSON object with --json). With --speculative the request runs through the engine,
// where speculation lives (one request, n-gram proposals verified a step at a time): the tokens
// are the same, only sooner.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_common.hpp"
#include "job.hpp"
#include "servekit/core/json_file.hpp"
#include "servekit/lora/adapter.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/model/load_gpt2.hpp"
#include "servekit/model/merge_lora.hpp"
#include "servekit/model/random_gpt2.hpp"
#include "servekit/serve/engine.hpp"
#include "servekit/constrain/gbnf.hpp"
#include "servekit/constrain/text_grammar.hpp"
#include "servekit/serve/generate.hpp"

namespace servekit::cli {

template <class D>
model::Gpt2Tensors base_tensors(const GenerateArgs& a) {
  if (a.model.empty()) return model::random_gpt2<D>(a.seed);
  if (a.as_json) return model::load_gpt2<D>(a.model);  // scripts read the JSON's timings
  // A large checkpoint takes seconds to read: say what is happening.
  std::fprintf(stderr, "servekit: loading %s (%s) ...", a.model.c_str(),
               std::string(D::name).c_str());
  const auto t0 = std::chrono::steady_clock::now();
  model::Gpt2Tensors t;
  try {
    t = model::load_gpt2<D>(a.model);
  } catch (...) {
    std::fprintf(stderr, "\n");  // the error goes on its own line, not after "loading ..."
    throw;
  }
  std::fprintf(stderr, " %.1f s\n",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return t;
}

// opt's request through a one-request engine with a.speculative on; an unmerged --adapter is
// registered with the engine's store (the model holds none of its own).
template <class Model>
serve::Result speculate(Model& model, const GenerateArgs& a, const text::Gpt2Tokenizer& tok,
                        std::span<const int32_t> prompt, const serve::GenerateOptions& opt,
                        const serve::StreamCallback& stream, bool merged) {
  serve::Engine<Model, serve::sched::Continuous> engine(
      model, tok, {.max_batch = 1, .speculative = a.speculative});
  serve::Request req;
  req.prompt_ids.assign(prompt.begin(), prompt.end());
  req.sampling = opt.sampling, req.stop = opt.stop, req.top_logprobs = opt.top_logprobs;
  req.json_schema = opt.json_schema, req.on_piece = stream;
  if (!a.adapter.empty() && !merged) {
    if constexpr (lora::enabled<typename Model::Config::Lora>) {
      engine.adapters().add("adapter", a.adapter);
      req.adapter = "adapter";
    }
  }
  auto r = engine.generate(std::move(req));
  if (r.finish_reason == serve::finish::error) fail(r.error);
  return r;
}

template <class Model>
int generate_with(Model& model, const GenerateArgs& a, const text::Gpt2Tokenizer& tok,
                  int32_t adapter, bool merged) {
  using D = typename Model::Dims;
  auto prompt = a.prompt_ids.empty() ? tok.encode(a.prompt) : a.prompt_ids;
  if (prompt.empty()) fail("the prompt is empty: give --prompt TEXT or --prompt-ids");
  for (std::size_t i = 0; i < prompt.size(); i++)
    if (prompt[i] < 0 || prompt[i] >= D::vocab)
      fail("prompt token ", i, " has id ", prompt[i], ", outside the vocabulary [0, ", D::vocab,
           ") of ", D::name,
           a.prompt_ids.empty() ? " (the tokenizer's vocabulary is larger than the model's)" : "");
  serve::GenerateOptions opt;
  opt.sampling.temperature = a.greedy ? 0.f : a.temperature;
  opt.sampling.top_k = a.top_k;
  opt.sampling.top_p = a.top_p;
  opt.sampling.seed = a.seed;
  opt.stop.max_new_tokens = a.max_new_tokens;
  opt.stop.stop_at_eos = !a.ignore_eos;
  opt.stop.stop_strings = a.stop;
  opt.use_cache = !a.no_cache;
  opt.top_logprobs = a.top_logprobs;
  opt.adapter = adapter;
  if (!a.json_schema.empty()) {
    try {
      opt.json_schema = constrain::compile_json_schema(read_json_file(a.json_schema));
    } catch (const Error& e) {
      fail("--json-schema ", a.json_schema, ": ", e.what());
    }
  }
  if (!a.regex.empty()) {
    try {
      opt.json_schema = constrain::compile_regex(a.regex);
    } catch (const Error& e) {
      fail("--regex: ", e.what());
    }
  }
  if (!a.grammar.empty()) {
    try {
      opt.json_schema = constrain::compile_gbnf(text::detail::read_file(a.grammar, "grammar"));
    } catch (const Error& e) {
      fail("--grammar ", a.grammar, ": ", e.what());
    }
  }
  if (!a.choices.empty()) {
    try {
      opt.json_schema = constrain::compile_choice(a.choices);
    } catch (const Error& e) {
      fail("--choice: ", e.what());
    }
  }

  serve::StreamCallback stream;
  const std::string prompt_text = a.prompt_ids.empty() ? a.prompt : tok.decode(prompt);
  if (!a.as_json) {
    std::cout << prompt_text << std::flush;
    g_stdout_mid_line = true;
    stream = [](std::string_view piece, const serve::GeneratedToken&) {
      std::cout << piece << std::flush;
      return true;
    };
  }
  auto r = a.speculative.on() ? speculate(model, a, tok, prompt, opt, stream, merged)
                              : serve::generate(model, tok, prompt, opt, stream);
  const double decode_ms = r.metrics.e2e_ms - r.metrics.ttft_ms;
  const double tps = r.tokens.size() > 1 ? (r.tokens.size() - 1) / (decode_ms / 1e3) : 0.0;
  if (!a.as_json) {
    std::cout << std::endl;  // flushed before the stats line on stderr
    g_stdout_mid_line = false;
    if (a.top_logprobs > 0) {  // one line per generated token: its logprob, then the best K
      std::cout << "top logprobs:\n";
      for (std::size_t i = 0; i < r.tokens.size(); i++) {
        const auto& t = r.tokens[i];
        // A token may be part of a UTF-8 character: shown JSON-quoted, the part replaced.
        std::cout << "  " << i << " " << dump(tok.token_bytes(t.id)) << " " << t.logprob << " |";
        for (const auto& alt : t.top)
          std::cout << " " << dump(tok.token_bytes(alt.id)) << " " << alt.logprob;
        std::cout << "\n";
      }
      std::cout << std::flush;
    }
    std::fprintf(
        stderr, "[%s] %zu prompt + %zu new tokens, finish: %s, TTFT %.1f ms, %.2f tok/s after it\n",
        Model::name().c_str(), prompt.size(), r.tokens.size(), r.finish_reason.c_str(),
        r.metrics.ttft_ms, tps);
    if (a.speculative.on())
      std::fprintf(stderr, "[speculative] %d tokens proposed, %d accepted\n",
                   r.metrics.spec_proposed, r.metrics.spec_accepted);
    return 0;
  }
  json j;
  j["model"] = a.model.empty() ? "random-gpt2-124M" : a.model;
  j["config"] = Model::name();
  if (!a.adapter.empty()) j["adapter"] = {{"path", a.adapter}, {"merged", merged}};
  j["prompt"] = prompt_text;
  j["prompt_ids"] = r.prompt_ids;
  j["generated_ids"] = r.ids();
  j["text"] = r.text;
  j["finish_reason"] = r.finish_reason;
  if (a.speculative.on())
    j["speculative"] = {{"proposed", r.metrics.spec_proposed},
                        {"accepted", r.metrics.spec_accepted}};
  json ms = json::array();
  for (auto& t : r.tokens) ms.push_back(t.ms);
  j["timings"] = {{"ttft_ms", r.metrics.ttft_ms},
                  {"total_ms", r.metrics.e2e_ms},
                  {"decode_tokens_per_s", tps},
                  {"token_ms", ms},
                  {"kv_cache", !a.no_cache}};
  if (a.top_logprobs > 0) {
    json toks = json::array();
    for (auto& t : r.tokens) {
      json top = json::array();
      for (auto& alt : t.top)
        top.push_back(
            {{"id", alt.id}, {"text", tok.token_bytes(alt.id)}, {"logprob", alt.logprob}});
      toks.push_back({{"id", t.id},
                      {"text", tok.token_bytes(t.id)},
                      {"logprob", t.logprob},
                      {"top_logprobs", top}});
    }
    j["tokens"] = toks;
  }
  std::cout << dump(j) << std::endl;
  return 0;
}

// The model the options ask for: the base weights, an adapter merged into them (--lora merge),
// or the base weights with the adapter beside them, applied at run time.
template <class C, class D>
int generate_as(const Job& job) {
  const GenerateArgs& a = *job.generate;
  using Model = Gpt2<typename C::template Config<D>>;
  auto t = base_tensors<D>(a);
  if (a.adapter.empty()) {
    Model model(std::move(t));
    return generate_with(model, a, *job.tok, -1, false);
  }
  if constexpr (lora::enabled<typename C::Lora>)
    if (a.speculative.on() && !job.choice.merge) {  // the engine's adapter store loads it
      Model model(std::move(t));
      return generate_with(model, a, *job.tok, -1, false);
    }
  auto adapter = lora::load_adapter<D>(a.adapter);
  if (job.choice.merge) {
    lora::merge(t, adapter);
    Model model(std::move(t));
    return generate_with(model, a, *job.tok, -1, true);
  }
  if constexpr (lora::enabled<typename C::Lora>) {
    Model model(std::move(t));
    const int slot = model.add_adapter(std::move(adapter));
    return generate_with(model, a, *job.tok, slot, false);
  } else {
    fail("--adapter needs a LoRA dispatch: --lora gathered, loop, segmented or merge");
  }
}

}  // namespace servekit::cli
