// SPDX-License-Identifier: Apache-2.0
#pragma once
// The text-generation-inference / LoRAX API: what a POST to /generate, /generate_stream or /
// asks for, and the JSON its clients (lorax-client, text-generation) read back.
//
//   {"inputs": "...", "parameters": {"adapter_id": "cnn", "max_new_tokens": 32, "do_sample":
//    true, "temperature": 0.7, "seed": 1, "stop": ["\n"], "details": true}, "stream": false}
//   -> {"generated_text": "...", "details": {"finish_reason": "length", "prompt_tokens": 5,
//       "generated_tokens": 32, "seed": 1, "prefill": [], "tokens": [{"id", "text", "logprob",
//       "special"}, ...]}}
//
// A parameter servekit does not implement (repetition_penalty != 1, typical_p, watermark,
// merged adapters, ...) is refused with 422, never ignored.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "servekit/serve/http/json_fields.hpp"
#include "servekit/serve/http/response_format.hpp"
#include "servekit/serve/request.hpp"

namespace servekit::serve::http {

struct ApiLimits {
  int default_max_new_tokens = 100;
  int max_new_tokens = 1 << 20;  // the model's context ends a request long before this
  std::size_t max_stop = 16, max_stop_bytes = 256;
  int max_alternatives = 20;
  int max_choices = 64;  // OpenAI's n (each choice is a request, within max_pending too)
};

struct GenerateCall {
  Request req;                                // prompt text, sampling, stop rules, adapter
  std::optional<std::string> adapter_source;  // "hub" (a registered name) or "local" (a folder)
  bool stream = false;                        // POST /: "stream": true answers with events
  bool details = false, return_full_text = false;
  bool sampling = false;        // do_sample, or a warper set: details.seed is reported
  bool seeded = false;          // the request gave its seed
  std::optional<int> truncate;  // keep only the last `truncate` prompt tokens
};

inline bool is_one(const json& v) {
  return v.is_number() && v.get<double>() == 1.0;
}
inline bool is_false(const json& v) {
  return v.is_boolean() && !v.get<bool>();
}
inline bool is_zero(const json& v) {
  return v.is_number() && v.get<double>() == 0.0;
}

inline GenerateCall parse_generate(const json& body, const ApiLimits& lim = {}) {
  GenerateCall c;
  Fields top(body, "");
  auto inputs = top.string("inputs");
  if (!inputs) invalid("`inputs` is required (the prompt text)");
  if (inputs->empty()) invalid("`inputs` must not be empty");
  c.req.prompt = *inputs;
  c.stream = top.boolean("stream").value_or(false);
  const json none = json::object();
  const bool has_params = top.has("parameters");
  if (has_params && !top.at("parameters").is_object())
    invalid("`parameters` must be an object, got ", shown(top.at("parameters")));
  top.no_others();

  Fields p(has_params ? body.at("parameters") : none, "parameters.");
  c.req.adapter = p.string("adapter_id");
  if (c.req.adapter && c.req.adapter->empty()) c.req.adapter.reset();  // "": the base model
  c.adapter_source = p.string("adapter_source");
  if (c.adapter_source && *c.adapter_source != "hub" && *c.adapter_source != "local")
    throw ApiError(422, "validation",
                   detail::cat("`parameters.adapter_source` = \"", c.adapter_source->substr(0, 40),
                               "\" is not supported by servekit (\"hub\": an adapter the server "
                               "registered; \"local\": a folder on the server)"));
  p.string("api_token");  // only meaningful to a hub servekit never reaches
  p.unsupported("merged_adapters", [](const json&) { return false; });
  const auto do_sample = p.boolean("do_sample").value_or(false);
  const auto temperature = p.number("temperature");
  const auto top_k = p.integer("top_k", 1, 1 << 30);
  const auto top_p = p.number("top_p");
  if (temperature && *temperature < 0)
    invalid("`parameters.temperature` must be >= 0, got ", *temperature);
  if (top_p && !(*top_p > 0 && *top_p <= 1))
    invalid("`parameters.top_p` must be in (0, 1], got ", *top_p);
  // As in text-generation-inference: a warper away from its neutral value turns sampling on.
  c.sampling = do_sample || (temperature && *temperature != 1.0 && *temperature != 0.0) || top_k ||
               (top_p && *top_p < 1.0);
  if (temperature && *temperature == 0.0) c.sampling = false;
  if (c.sampling) {
    c.req.sampling.temperature = static_cast<float>(temperature.value_or(1.0));
    c.req.sampling.top_k = static_cast<int>(top_k.value_or(0));
    c.req.sampling.top_p = static_cast<float>(top_p.value_or(1.0));
  }
  if (auto s = p.seed("seed")) c.req.sampling.seed = *s, c.seeded = true;
  c.req.stop.max_new_tokens = static_cast<int>(
      p.integer("max_new_tokens", 1, lim.max_new_tokens).value_or(lim.default_max_new_tokens));
  c.req.stop.stop_at_eos = !p.boolean("ignore_eos_token").value_or(false);
  c.req.stop.stop_strings = p.strings("stop", lim.max_stop, lim.max_stop_bytes);
  c.details = p.boolean("details").value_or(false);
  c.return_full_text = p.boolean("return_full_text").value_or(false);
  if (auto t = p.integer("truncate", 1, 1 << 30)) c.truncate = static_cast<int>(*t);
  if (auto k = p.integer("return_k_alternatives", 1, lim.max_alternatives))
    c.req.top_logprobs = static_cast<int>(*k);
  p.unsupported("repetition_penalty", is_one);
  p.unsupported("frequency_penalty", is_zero);
  p.unsupported("presence_penalty", is_zero);
  p.unsupported("typical_p", is_one);
  p.unsupported("best_of", is_one);
  p.unsupported("watermark", is_false);
  // The prompt's tokens in details.prefill, each with its log-probability given the ones
  // before it (the first has none).
  if (p.boolean("decoder_input_details").value_or(false)) c.req.prompt_logprobs = 0;
  p.unsupported("top_n_tokens", is_zero, " (use return_k_alternatives)");
  if (p.has("response_format"))
    c.req.json_schema = response_format(p.at("response_format"), "parameters.response_format");
  if (p.has("grammar")) {
    if (c.req.json_schema)
      invalid(
          "`parameters.response_format` and `parameters.grammar` both constrain the output: "
          "give one of them");
    c.req.json_schema = tgi_grammar(p.at("grammar"), "parameters.grammar");
  }
  p.unsupported("adapter_parameters", [](const json&) { return false; });
  p.no_others();
  return c;
}

// TGI's names for why generation ended.
inline std::string tgi_finish(const std::string& r) {
  if (r == finish::eos) return "eos_token";
  if (r == finish::stop) return "stop_sequence";
  return "length";  // length, and the model's context ending it
}

// One generated token as TGI shows it: its streamed text, so the texts add up to the output.
inline json tgi_token(const GeneratedToken& t, const std::string& text, int32_t eos,
                      const std::vector<std::string>& alt_text = {}) {
  json j = {{"id", t.id}, {"text", text}, {"logprob", t.logprob}, {"special", t.id == eos}};
  if (!t.top.empty()) {
    json alts = json::array();
    for (std::size_t i = 0; i < t.top.size(); i++)
      alts.push_back({{"id", t.top[i].id},
                      {"text", i < alt_text.size() ? alt_text[i] : ""},
                      {"logprob", t.top[i].logprob}});
    j["alternative_tokens"] = alts;
  }
  return j;
}

// What the server knows of a finished request besides its Result: each token's streamed text
// (they add up to Result::text) and how to spell an alternative token.
struct Finished {
  const Result& result;
  const std::vector<std::string>& pieces;
  int32_t eos;
  std::function<std::string(int32_t)> token_text;
};

inline json tgi_tokens(const Finished& f) {
  json toks = json::array();
  const auto& ts = f.result.tokens;
  for (std::size_t i = 0; i < ts.size(); i++) {
    std::vector<std::string> alts;
    for (const auto& a : ts[i].top) alts.push_back(f.token_text(a.id));
    toks.push_back(tgi_token(ts[i], i < f.pieces.size() ? f.pieces[i] : "", f.eos, alts));
  }
  return toks;
}

inline json tgi_seed(const GenerateCall& c) {
  return c.sampling ? json(c.req.sampling.seed) : json(nullptr);
}

// details.prefill: the prompt's tokens, each with its log-probability given the ones before it
// (decoder_input_details; null for the first, as TGI's NaN is), else none.
inline json tgi_prefill(const GenerateCall& c, const Finished& f) {
  json pre = json::array();
  if (c.req.prompt_logprobs < 0) return pre;
  const auto& ids = f.result.prompt_ids;
  const auto& lp = f.result.prompt_logprobs;
  for (std::size_t i = 0; i < ids.size(); i++)
    pre.push_back({{"id", ids[i]},
                   {"text", f.token_text(ids[i])},
                   {"logprob", i == 0 || i > lp.size() ? json(nullptr) : json(lp[i - 1].logprob)}});
  return pre;
}

// The body of a /generate answer (POST / wraps it in a list).
inline json tgi_response(const GenerateCall& c, const Finished& f) {
  const Result& r = f.result;
  json j = {{"generated_text", c.return_full_text ? c.req.prompt + r.text : r.text}};
  if (c.details)
    j["details"] = {{"finish_reason", tgi_finish(r.finish_reason)},
                    {"prompt_tokens", r.metrics.prompt_tokens},
                    {"cached_tokens", r.metrics.cached_tokens},
                    {"generated_tokens", r.tokens.size()},
                    {"seed", tgi_seed(c)},
                    {"prefill", tgi_prefill(c, f)},
                    {"tokens", tgi_tokens(f)}};
  return j;
}

// One server-sent event of /generate_stream: a token, and with the last one the whole text
// and (details) the summary.
inline json tgi_stream_event(const GenerateCall& c, const GeneratedToken& t,
                             const std::string& text, int32_t eos, const Result* last,
                             const std::vector<std::string>& alt_text = {}) {
  json j = {{"token", tgi_token(t, text, eos, alt_text)},
            {"generated_text", nullptr},
            {"details", nullptr}};
  if (last) {
    j["generated_text"] = c.return_full_text ? c.req.prompt + last->text : last->text;
    if (c.details)
      j["details"] = {{"finish_reason", tgi_finish(last->finish_reason)},
                      {"prompt_tokens", last->metrics.prompt_tokens},
                      {"cached_tokens", last->metrics.cached_tokens},
                      {"generated_tokens", last->tokens.size()},
                      {"seed", tgi_seed(c)}};
  }
  return j;
}

}  // namespace servekit::serve::http
