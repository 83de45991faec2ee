// SPDX-License-Identifier: Apache-2.0
#pragma once
// `servekit batch`: a file of requests (JSON lines) through the serving engine, one result line
// per request in input order. A malformed line gets an error result naming its line number;
// the other requests still run.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "job.hpp"
#include "servekit/core/error.hpp"
#include "servekit/model/config.hpp"
#include "servekit/lora/adapter.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/model/load_gpt2.hpp"
#include "servekit/model/merge_lora.hpp"
#include "servekit/model/random_gpt2.hpp"
#include "servekit/serve/engine.hpp"

namespace servekit::cli {

// One input line -> a request. Fields: prompt (text) or prompt_ids, max_new_tokens,
// temperature (0: greedy, the default), top_k, top_p, seed, stop (string or list), ignore_eos,
// adapter (the folder name of one of --adapter's adapters), json_schema (the output is JSON
// that fits it; a schema object), regex (the whole output matches it), choice (the output is
// one of these strings), grammar (a GBNF grammar's text: the whole output is a text of its rule
// root), speculate (false: no speculation for it under --speculative), prompt_logprobs (k >= 0:
// each prompt token's log-probability given the ones before it, with the k best alternatives;
// with max_new_tokens 0 the prompt alone is scored), priority (with --scheduling-policy
// priority: lower numbers are admitted first).
inline serve::Request parse_request(const json& j, int lineno) {
  auto where = [&](const char* f) { return detail::cat("line ", lineno, ": field \"", f, "\""); };
  if (!j.is_object()) fail("line ", lineno, ": expected a JSON object, got ", j.type_name());
  static const char* known[] = {
      "prompt", "prompt_ids", "max_new_tokens", "temperature",     "top_k",       "top_p",
      "seed",   "stop",       "ignore_eos",     "adapter",         "json_schema", "regex",
      "choice", "grammar",    "speculate",      "prompt_logprobs", "priority"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (std::find_if(std::begin(known), std::end(known),
                     [&](const char* k) { return it.key() == k; }) == std::end(known))
      fail("line ", lineno, ": unknown field \"", it.key(),
           "\" (known: prompt, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed, stop, "
           "ignore_eos, adapter, json_schema, regex, choice, grammar, speculate, "
           "prompt_logprobs, priority)");
  serve::Request r;
  auto get = [&](const char* f, auto& out) {
    if (!j.contains(f)) return;
    try {
      j.at(f).get_to(out);
    } catch (const json::exception&) {
      fail(where(f), " has the wrong type (", j.at(f).type_name(), ")");
    }
  };
  get("prompt", r.prompt);
  get("prompt_ids", r.prompt_ids);
  if (!j.contains("prompt") && !j.contains("prompt_ids"))
    fail("line ", lineno, ": give \"prompt\" (text) or \"prompt_ids\"");
  get("max_new_tokens", r.stop.max_new_tokens);
  get("temperature", r.sampling.temperature);
  get("top_k", r.sampling.top_k);
  get("top_p", r.sampling.top_p);
  get("seed", r.sampling.seed);
  if (j.contains("adapter")) {
    std::string name;
    get("adapter", name);
    r.adapter = name;
  }
  if (j.contains("stop")) {
    if (j["stop"].is_string())
      r.stop.stop_strings = {j["stop"].get<std::string>()};
    else
      get("stop", r.stop.stop_strings);
  }
  if ((j.contains("json_schema") + j.contains("regex") + j.contains("choice") +
       j.contains("grammar")) > 1)
    fail("line ", lineno, ": give one of the fields json_schema, regex, choice and grammar");
  if (j.contains("grammar")) {
    std::string text;
    get("grammar", text);
    try {
      r.json_schema = constrain::compile_gbnf(text);
    } catch (const Error& e) {
      fail(where("grammar"), ": ", e.what());
    }
  }
  if (j.contains("json_schema")) {
    try {
      r.json_schema = constrain::compile_json_schema(j["json_schema"]);
    } catch (const Error& e) {
      fail(where("json_schema"), ": ", e.what());
    }
  }
  if (j.contains("regex")) {
    std::string re;
    get("regex", re);
    try {
      r.json_schema = constrain::compile_regex(re);
    } catch (const Error& e) {
      fail(where("regex"), ": ", e.what());
    }
  }
  if (j.contains("choice")) {
    std::vector<std::string> cs;
    get("choice", cs);
    try {
      r.json_schema = constrain::compile_choice(cs);
    } catch (const Error& e) {
      fail(where("choice"), ": ", e.what());
    }
  }
  get("speculate", r.speculate);
  if (j.contains("priority")) {
    const json& p = j.at("priority");
    if (!p.is_number_integer() || p.get<int64_t>() < INT_MIN || p.get<int64_t>() > INT_MAX)
      fail(where("priority"), " must be an integer (lower runs first), got ", p.dump());
    r.priority = static_cast<int>(p.get<int64_t>());
  }
  if (j.contains("prompt_logprobs")) {
    get("prompt_logprobs", r.prompt_logprobs);
    if (r.prompt_logprobs < 0)
      fail(where("prompt_logprobs"),
           " must be >= 0 (the alternatives at each prompt position), got ", r.prompt_logprobs);
  }
  bool ignore_eos = false;
  get("ignore_eos", ignore_eos);
  r.stop.stop_at_eos = !ignore_eos;
  return r;
}

// scored: the line asked for its prompt's log-probabilities ("prompt_logprobs": null for the
// first token, then {id, logprob, top: [{id, logprob}]} for each after it).
inline json result_json(const serve::Result& r, int lineno, bool scored) {
  json j;
  j["line"] = lineno;
  j["finish_reason"] = r.finish_reason;
  if (r.finish_reason == serve::finish::error) {
    j["error"] = r.error;
    return j;
  }
  j["text"] = r.text;
  j["prompt_tokens"] = r.metrics.prompt_tokens;
  j["cached_tokens"] = r.metrics.cached_tokens;
  if (r.metrics.spec_proposed > 0)
    j["speculative"] = {{"proposed", r.metrics.spec_proposed},
                        {"accepted", r.metrics.spec_accepted}};
  if (r.metrics.forced_tokens > 0) j["forced_tokens"] = r.metrics.forced_tokens;
  j["generated_ids"] = r.ids();
  if (scored) {
    json p = json::array({nullptr});
    for (const auto& t : r.prompt_logprobs) {
      json top = json::array();
      for (const auto& a : t.top) top.push_back({{"id", a.id}, {"logprob", a.logprob}});
      p.push_back({{"id", t.id}, {"logprob", t.logprob}, {"top", top}});
    }
    j["prompt_logprobs"] = p;
  }
  const auto& m = r.metrics;
  j["metrics"] = {{"queue_ms", m.queue_ms},
                  {"ttft_ms", m.ttft_ms},
                  {"tpot_ms", m.tpot_ms},
                  {"e2e_ms", m.e2e_ms},
                  {"generated_tokens", m.generated_tokens},
                  {"preemptions", m.preemptions}};
  return j;
}

template <class Model, class Sched>
int run_batch_with(Model& model, const text::Gpt2Tokenizer& tok, const BatchArgs& a,
                   const RunChoice& choice) {
  std::ifstream in(a.input);
  if (!in) fail("batch: cannot open --input ", a.input);
  std::vector<serve::Request> reqs;
  std::vector<std::string> line_error;  // per request: parse error, or empty
  std::vector<int> line_no;
  std::vector<char> scored;  // per request: it asked for its prompt's log-probabilities
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    lineno++;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    serve::Request r;
    std::string err;
    try {
      r = parse_request(json::parse(line), lineno);
    } catch (const json::exception& e) {
      err = detail::cat("line ", lineno, ": not valid JSON: ", e.what());
    } catch (const Error& e) {
      err = e.what();
    }
    if (err.empty()) {
      reqs.push_back(std::move(r));
    } else {
      reqs.emplace_back();  // a placeholder: it gets an error result, never runs
    }
    scored.push_back(err.empty() && reqs.back().prompt_logprobs >= 0);
    line_error.push_back(err);
    line_no.push_back(lineno);
  }
  const int n = static_cast<int>(reqs.size());
  serve::EngineOptions opt{.max_batch = a.max_batch,
                           .max_batched_tokens = a.max_batched_tokens,
                           .kv_blocks = a.kv_blocks,
                           .memory_limit = a.memory_limit};
  opt.prefix_caching = !a.no_prefix_caching;
  opt.jump_forward = !a.no_jump_forward;
  opt.priority_scheduling = a.scheduling_policy == "priority";
  opt.prefix_cache_blocks = a.prefix_cache_blocks;
  opt.speculative = a.speculative;
  opt.max_active_adapters = choice.max_loras;
  opt.adapter_max_rank = choice.max_lora_rank;
  if (a.adapter_host_bytes > 0) opt.adapter_host_bytes = a.adapter_host_bytes;
  if (a.adapter_device_bytes > 0) opt.adapter_device_bytes = a.adapter_device_bytes;
  serve::Engine<Model, Sched> engine(model, tok, opt);
  std::vector<serve::Request> runnable;
  std::vector<int> at;  // runnable index -> request index
  for (int i = 0; i < n; i++)
    if (line_error[i].empty()) runnable.push_back(std::move(reqs[i])), at.push_back(i);
  std::fprintf(stderr, "batch: %d requests (%zu malformed) through %s, max batch %d\n", n,
               n - runnable.size(), decltype(engine)::name().c_str(), a.max_batch);
  std::fprintf(stderr, "batch: memory: %s\n", engine.memory().describe().c_str());
  auto results = engine.run_all(std::move(runnable), [&](int done, int total) {
    const int w = 40, fill = total ? done * w / total : w;
    std::fprintf(stderr, "\r[%s%s] %d/%d", std::string(fill, '#').c_str(),
                 std::string(w - fill, '.').c_str(), done, total);
  });
  std::fprintf(stderr, "\n");
  std::vector<serve::Result> all(n);
  for (std::size_t k = 0; k < results.size(); k++) all[at[k]] = std::move(results[k]);
  std::ofstream file;
  if (!a.output.empty() && a.output != "-") {
    file.open(a.output);
    if (!file) fail("batch: cannot write --output ", a.output);
  }
  std::ostream& out = file.is_open() ? file : std::cout;
  int bad = 0;
  for (int i = 0; i < n; i++) {
    if (!line_error[i].empty()) {
      all[i].finish_reason = std::string(serve::finish::error);
      all[i].error = line_error[i];
    } else if (all[i].finish_reason == serve::finish::error) {
      all[i].error = detail::cat("line ", line_no[i], ": ", all[i].error);
    }
    bad += all[i].finish_reason == serve::finish::error;
    out << dump(result_json(all[i], line_no[i], scored[i])) << '\n';
  }
  const auto s = engine.stats();
  std::fprintf(stderr,
               "batch: %ld steps, %ld prompt + %ld generated tokens, %.1f generated tok/s, "
               "%ld preemptions, %d errors\n",
               s.steps, s.prompt_tokens, s.generated_tokens, s.tokens_per_s(), s.preemptions, bad);
  if (s.prefix_caching)
    std::fprintf(stderr,
                 "batch: prefix cache: %ld of %ld prompt tokens found cached (%.1f%%), %d blocks "
                 "cached\n",
                 s.prefix_cache_hits, s.prefix_cache_queries, 100 * s.prefix_hit_rate(),
                 s.cache_blocks_cached);
  if (s.forced_tokens > 0)
    std::fprintf(stderr,
                 "batch: jump-forward: %ld tokens forced by grammars, without a step each\n",
                 s.forced_tokens);
  if (s.spec_verifies > 0)
    std::fprintf(stderr,
                 "batch: speculation: %ld of %ld proposed tokens accepted (%.1f%%), %.2f tokens "
                 "per verifying step\n",
                 s.spec_accepted, s.spec_proposed, 100 * s.spec_acceptance(), s.spec_mean_length());
  return bad ? 1 : 0;
}

// The composition main() picked: its scheduler, and the adapters applied at run time (every
// row may carry its own) or, with --lora merge, the one adapter folded into the weights.
template <class C, class D>
int batch_as(const Job& job) {
  const BatchArgs& a = *job.batch;
  using Model = Gpt2<typename C::template Config<D>>;
  using Sched = typename C::Scheduler;
  auto tensors = a.model.empty() ? model::random_gpt2<D>(a.seed) : model::load_gpt2<D>(a.model);
  if (job.choice.merge) {
    if (a.adapters.size() != 1)
      fail("batch: --lora merge folds one adapter into the weights; ", a.adapters.size(),
           " --adapter given (serve several with --lora gathered, loop or segmented)");
    auto adapter = lora::load_adapter<D>(a.adapters[0]);
    lora::merge(tensors, adapter);
    std::fprintf(stderr, "batch: adapter '%s' from %s merged into the weights\n",
                 adapter.name.c_str(), a.adapters[0].c_str());
    Model model(std::move(tensors));
    return run_batch_with<Model, Sched>(model, *job.tok, a, job.choice);
  }
  Model model(std::move(tensors));
  if constexpr (lora::enabled<typename C::Lora>) {
    for (const auto& dir : a.adapters) {
      const int slot = model.add_adapter(lora::load_adapter<D>(dir));
      std::fprintf(stderr, "batch: adapter '%s' from %s (r = %d)\n",
                   model.adapter(slot)->name.c_str(), dir.c_str(), model.adapter(slot)->rank);
    }
  } else if (!a.adapters.empty()) {
    fail("batch: --adapter needs a LoRA dispatch: --lora gathered, loop, segmented or merge");
  }
  return run_batch_with<Model, Sched>(model, *job.tok, a, job.choice);
}

}  // namespace servekit::cli
