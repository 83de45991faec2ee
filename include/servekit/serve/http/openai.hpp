// SPDX-License-Identifier: Apache-2.0
#pragma once
// The OpenAI completions API (as vLLM and LoRAX also serve it): POST /v1/completions, where
// `model` names the base model or an adapter, and its answer or stream of chunks.
//
//   {"model": "cnn", "prompt": "...", "max_tokens": 32, "temperature": 0, "stream": true}
//   -> data: {"id": "cmpl-7", "object": "text_completion", "choices": [{"index": 0, "text":
//      " the", "logprobs": null, "finish_reason": null}], ...}  ...  data: [DONE]
#include <chrono>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "servekit/serve/http/json_fields.hpp"
#include "servekit/serve/http/tgi.hpp"
#include "servekit/serve/request.hpp"

namespace servekit::serve::http {

struct CompletionCall {
  Request req;  // prompt (text or ids), sampling, stop rules; adapter: from `model`
  std::string model;
  bool stream = false, echo = false, include_usage = false;
  bool sampling = false;  // temperature > 0: a seed is drawn when none is given
  bool seeded = false;    // the request gave its seed
  int logprobs = -1;      // -1: none; k >= 0: each token's log-probability and k alternatives
  int n = 1;              // choices: n requests, choice i seeded seed + i (vLLM's rule)
};

inline CompletionCall parse_completion(const json& body, const ApiLimits& lim = {}) {
  CompletionCall c;
  Fields f(body, "");
  auto model = f.string("model");
  if (!model) invalid("`model` is required (the base model's id or an adapter id; GET /v1/models)");
  c.model = *model;
  if (!f.has("prompt")) invalid("`prompt` is required");
  const json& pr = f.at("prompt");
  auto ids = [&](const json& a) {
    std::vector<int32_t> v;
    for (const auto& e : a) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > INT32_MAX)
        invalid("`prompt` token ids must be integers >= 0, got ", shown(e));
      v.push_back(static_cast<int32_t>(e.get<int64_t>()));
    }
    return v;
  };
  if (pr.is_string()) {
    c.req.prompt = pr.get<std::string>();
  } else if (pr.is_array() && pr.size() == 1 && pr[0].is_string()) {
    c.req.prompt = pr[0].get<std::string>();
  } else if (pr.is_array() && !pr.empty() && pr[0].is_number()) {
    c.req.prompt_ids = ids(pr);
  } else if (pr.is_array() && pr.size() == 1 && pr[0].is_array()) {
    c.req.prompt_ids = ids(pr[0]);
  } else if (pr.is_array() && pr.size() > 1) {
    invalid("`prompt` has ", pr.size(), " prompts; servekit takes one per request");
  } else {
    invalid("`prompt` must be a string, a list of one string, or a list of token ids, got ",
            shown(pr));
  }
  if (c.req.prompt.empty() && c.req.prompt_ids.empty()) invalid("`prompt` must not be empty");
  c.req.stop.max_new_tokens =
      static_cast<int>(f.integer("max_tokens", 0, lim.max_new_tokens).value_or(16));
  const double temperature = f.number("temperature").value_or(1.0);
  if (temperature < 0) invalid("`temperature` must be >= 0, got ", temperature);
  const double top_p = f.number("top_p").value_or(1.0);
  if (!(top_p > 0 && top_p <= 1)) invalid("`top_p` must be in (0, 1], got ", top_p);
  const auto top_k = f.integer("top_k", -1, 1 << 30).value_or(0);  // vLLM's extension; -1: off
  c.sampling = temperature > 0;
  c.req.sampling.temperature = static_cast<float>(temperature);
  c.req.sampling.top_p = static_cast<float>(top_p);
  c.req.sampling.top_k = static_cast<int>(std::max<int64_t>(top_k, 0));
  if (auto s = f.seed("seed")) c.req.sampling.seed = *s, c.seeded = true;
  c.req.stop.stop_strings = f.strings("stop", lim.max_stop, lim.max_stop_bytes);
  c.req.stop.stop_at_eos = !f.boolean("ignore_eos").value_or(false);
  c.stream = f.boolean("stream").value_or(false);
  c.echo = f.boolean("echo").value_or(false);
  if (auto k = f.integer("logprobs", 0, lim.max_alternatives)) {
    c.logprobs = static_cast<int>(*k);
    c.req.top_logprobs = c.logprobs;
  }
  // Echoed with logprobs, the prompt's tokens lead the logprobs, each with its log-probability
  // given the ones before it (none for the first), as OpenAI's legacy API and vLLM answer: what
  // an evaluation's log-likelihood reads (with max_tokens 0 the prompt alone runs). Unstreamed
  // answers only; a stream's logprobs are its generated tokens'.
  if (c.echo && c.logprobs >= 0 && !c.stream) c.req.prompt_logprobs = c.logprobs;
  if (f.has("stream_options")) {
    if (!f.at("stream_options").is_object())
      invalid("`stream_options` must be an object, got ", shown(f.at("stream_options")));
    Fields so(f.at("stream_options"), "stream_options.");
    c.include_usage = so.boolean("include_usage").value_or(false);
    so.boolean("continuous_usage_stats");
    so.no_others();
  }
  if (auto n = f.integer("n", 1, lim.max_choices)) c.n = static_cast<int>(*n);
  f.string("user");
  // vLLM's extension: lower runs first, with the server's --scheduling-policy priority.
  if (auto p = f.integer("priority", INT_MIN, INT_MAX)) c.req.priority = static_cast<int>(*p);
  f.unsupported("best_of", is_one);
  f.unsupported("presence_penalty", is_zero);
  f.unsupported("frequency_penalty", is_zero);
  f.unsupported("repetition_penalty", is_one);
  f.unsupported("logit_bias", [](const json& v) { return v.is_object() && v.empty(); });
  f.unsupported("suffix", [](const json&) { return false; });
  c.req.json_schema = guided_grammar(f);
  f.no_others();
  return c;
}

inline std::string openai_finish(const std::string& r) {
  return r == finish::eos || r == finish::stop ? "stop" : "length";
}

// OpenAI's logprobs object, a token at a time: its text, log-probability and alternatives (none
// for a prompt's first token: null), at a text offset that grows with the texts.
struct OpenAiLogprobs {
  json toks = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  std::size_t offset = 0;

  void add(const Finished& f, const std::string& piece, const float* logprob,
           const std::vector<TokenLogprob>& alternatives) {
    toks.push_back(piece);
    offs.push_back(offset);
    offset += piece.size();
    if (!logprob) {
      lps.push_back(nullptr);
      tops.push_back(nullptr);
      return;
    }
    lps.push_back(*logprob);
    json top = json::object();
    for (const auto& a : alternatives) top[f.token_text(a.id)] = a.logprob;
    tops.push_back(top);
  }
  json done() const {
    return {
        {"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
  }
};

// The answer's logprobs: with the prompt's (echo with logprobs) its tokens first, offsets from the
// echoed prompt's start; then the generated tokens', from head_size (the echoed text's length).
inline json openai_logprobs(const Finished& f, bool with_prompt, std::size_t head_size) {
  OpenAiLogprobs lp;
  if (with_prompt) {
    const auto& ids = f.result.prompt_ids;
    const auto& pl = f.result.prompt_logprobs;
    for (std::size_t i = 0; i < ids.size(); i++) {
      const bool has = i > 0 && i <= pl.size();
      lp.add(f, f.token_text(ids[i]), has ? &pl[i - 1].logprob : nullptr,
             has ? pl[i - 1].top : std::vector<TokenLogprob>{});
    }
  }
  lp.offset = head_size;
  const auto& ts = f.result.tokens;
  for (std::size_t i = 0; i < ts.size(); i++)
    lp.add(f, i < f.pieces.size() ? f.pieces[i] : "", &ts[i].logprob, ts[i].top);
  return lp.done();
}

// The prompt counted once, the choices' tokens summed (vLLM's usage for n choices).
inline json openai_usage(const std::vector<const Result*>& rs) {
  const Result& r = *rs[0];
  const int p = r.metrics.prompt_tokens;
  int g = 0;
  for (const Result* c : rs) g += static_cast<int>(c->tokens.size());
  return {{"prompt_tokens", p},
          {"completion_tokens", g},
          {"total_tokens", p + g},
          {"prompt_tokens_details", {{"cached_tokens", r.metrics.cached_tokens}}}};
}

inline int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline json openai_chunk(const CompletionCall& c, uint64_t id, int64_t created) {
  return {{"id", "cmpl-" + std::to_string(id)},
          {"object", "text_completion"},
          {"created", created},
          {"model", c.model}};
}

// The answer to a request of n choices: fs[i] is choice i's.
inline json openai_response(const CompletionCall& c, const std::vector<Finished>& fs,
                            int64_t created, const std::string& prompt_text) {
  json j = openai_chunk(c, fs[0].result.id, created);
  const std::string head = c.echo ? prompt_text : "";
  json choices = json::array();
  std::vector<const Result*> rs;
  for (std::size_t i = 0; i < fs.size(); i++) {
    const Finished& f = fs[i];
    json choice = {{"index", i},
                   {"text", head + f.result.text},
                   {"logprobs", nullptr},
                   {"finish_reason", openai_finish(f.result.finish_reason)}};
    if (c.logprobs >= 0)
      choice["logprobs"] = openai_logprobs(f, c.req.prompt_logprobs >= 0, head.size());
    choices.push_back(choice);
    rs.push_back(&f.result);
  }
  j["choices"] = choices;
  j["usage"] = openai_usage(rs);
  return j;
}

// OpenAI's error body.
inline json openai_error(const ApiError& e) {
  const char* type = e.status == 429   ? "rate_limit_error"
                     : e.status == 404 ? "not_found_error"
                     : e.status >= 500 ? "server_error"
                                       : "invalid_request_error";
  return {
      {"error", {{"message", e.what()}, {"type", type}, {"param", nullptr}, {"code", e.status}}}};
}

}  // namespace servekit::serve::http
