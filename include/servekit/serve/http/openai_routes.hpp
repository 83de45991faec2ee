// SPDX-License-Identifier: Apache-2.0
#pragma once
// OpenAI's completions routes: POST /v1/completions (one answer, or chunks as server-sent
// events ending in [DONE]) and GET /v1/models. `model` names the base model or a registered
// adapter. openai.hpp parses the requests and spells the answers; this admits, submits and
// answers them through the server's ServerCore. Errors are OpenAI's error objects.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "servekit/serve/http/event_stream.hpp"
#include "servekit/serve/http/identity.hpp"
#include "servekit/serve/http/openai.hpp"
#include "servekit/serve/http/server_core.hpp"

namespace servekit::serve::http {

class OpenAiRoutes {
 public:
  explicit OpenAiRoutes(ServerCore& core) : core_(core) {}

  void completions(const HttpRequest& q, HttpResponse& res) {
    try {
      auto ticket = core_.admit();
      CompletionCall c;
      try {
        c = parse_completion(parse_body(q.body), core_.opt().limits);
      } catch (const ApiError& e) {
        core_.reject(e.type);
        throw;
      }
      if (c.model != core_.opt().model_id) {
        bool known = false;
        known = core_.engine().adapter_registered(c.model);
        if (!known) {
          core_.reject("not_found");
          throw ApiError(404, "not_found",
                         detail::cat("the model `", c.model.substr(0, 80),
                                     "` does not exist (GET /v1/models lists them)"));
        }
        c.req.adapter = c.model;
      }
      if (c.sampling && !c.seeded) c.req.sampling.seed = core_.draw_seed();
      if (c.n > core_.opt().max_pending) {
        core_.reject("validation");
        throw ApiError(422, "validation",
                       detail::cat("`n` = ", c.n,
                                   ": each choice is a request, and the server "
                                   "admits ",
                                   core_.opt().max_pending, " at once (--max-pending)"));
      }
      std::string prompt_text =
          c.req.prompt.empty() ? core_.tok().decode(c.req.prompt_ids) : c.req.prompt;
      // Each choice is a request of its own, admitted and counted as one; they wake one
      // stream.
      std::vector<std::shared_ptr<Job>> jobs;
      auto bell = std::make_shared<Bell>();
      for (int i = 0; i < c.n; i++) {
        auto job = std::make_shared<Job>();
        job->ticket = i == 0 ? std::move(ticket) : core_.admit();
        job->flow->bell = bell;
        job->route = "/v1/completions";
        job->adapter = c.req.adapter.value_or("");
        job->prompt_text = prompt_text;
        jobs.push_back(std::move(job));
      }
      // With prefix caching, the first choice computes the prompt and the others map its
      // blocks: they are submitted once it has its first token (SGLang caches the prefix
      // first likewise). A request scoring its prompt maps nothing, so all go at once.
      const bool share =
          c.n > 1 && c.req.prompt_logprobs < 0 && core_.engine().stats().prefix_caching;
      for (int i = 0; i < c.n; i++) {
        if (share && i == 1) core_.wait_first_token(*jobs[0]);
        Request r = c.req;
        r.sampling.seed = c.req.sampling.seed + static_cast<uint64_t>(i);
        try {
          core_.submit(std::move(r), *jobs[i]);
        } catch (...) {
          for (int k = 0; k < i; k++) core_.abandon(*jobs[k]);
          throw;
        }
      }
      const int64_t created = unix_now();
      if (c.stream)
        return completions_stream(res, std::make_shared<CompletionCall>(std::move(c)), jobs,
                                  created);
      std::vector<Finished> fs;
      for (const auto& job : jobs) {
        const Result& r = core_.wait(*job);
        core_.finished(*job, r, job->adapter, false);
        fs.push_back({r, job->flow->pieces, core_.tok().eos_id(),
                      [this](int32_t id) { return core_.token_text(id); }});
      }
      for (const auto& f : fs) core_.throw_if_failed(f.result);
      json body = openai_response(c, fs, created, prompt_text);
      res.set_content(dump_json(body), "application/json");
    } catch (const ApiError& e) {
      send_error(res, e, true);
    }
  }

  // GET /v1/models: the base model, then each registered adapter as a model whose parent it is.
  json models() const {
    const std::string& base = core_.opt().model_id;
    const int64_t t = unix_now();
    json data = json::array();
    data.push_back({{"id", base},
                    {"object", "model"},
                    {"created", t},
                    {"owned_by", "servekit"},
                    {"root", base},
                    {"parent", nullptr},
                    {"max_model_len", core_.engine().identity().max_positions},
                    {"servekit", identity_json(core_.engine(), core_.opt().device)}});
    for (const auto& a : core_.adapter_ids())
      data.push_back({{"id", a},
                      {"object", "model"},
                      {"created", t},
                      {"owned_by", "servekit"},
                      {"root", a},
                      {"parent", base}});
    return {{"object", "list"}, {"data", data}};
  }

 private:
  using Job = ServerCore::Job;

  // One chunk per token, choice i's with index i (with echo, each choice's first carries the
  // prompt too); then, as the request asked, a chunk with the finish reason for a choice that
  // got no token, a usage chunk, and [DONE].
  void completions_stream(HttpResponse& res, std::shared_ptr<CompletionCall> c,
                          std::vector<std::shared_ptr<Job>> jobs, int64_t created) {
    const uint64_t id = jobs[0]->handle.id;
    const std::string prompt_text = jobs[0]->prompt_text;
    auto offset =
        std::make_shared<std::vector<std::size_t>>(jobs.size(), c->echo ? prompt_text.size() : 0);
    auto first = std::make_shared<std::vector<bool>>(jobs.size(), true);
    stream_flows(
        core_, res, jobs,
        [this, c, id, prompt_text, created, offset, first](
            Sink& sink, std::size_t i, const GeneratedToken& t, const std::string& piece,
            const Result* last) {
          json ch = openai_chunk(*c, id, created);
          std::string text = ((*first)[i] && c->echo ? prompt_text : "") + piece;
          (*first)[i] = false;
          json choice = {
              {"index", i},
              {"text", text},
              {"logprobs", nullptr},
              {"finish_reason", last ? json(openai_finish(last->finish_reason)) : json(nullptr)}};
          if (c->logprobs >= 0) {
            json top = json::object();
            for (const auto& a : t.top) top[core_.token_text(a.id)] = a.logprob;
            choice["logprobs"] = {{"tokens", {piece}},
                                  {"token_logprobs", {t.logprob}},
                                  {"top_logprobs", {top}},
                                  {"text_offset", {(*offset)[i] + text.size() - piece.size()}}};
          }
          (*offset)[i] += text.size();
          ch["choices"] = json::array({choice});
          return write_event(sink, dump_json(ch));
        },
        [c, id, prompt_text, created](Sink& sink, const std::vector<const Result*>& rs) {
          for (std::size_t i = 0; i < rs.size(); i++) {
            const Result& r = *rs[i];
            if (r.finish_reason == finish::error || r.finish_reason == finish::cancelled) {
              const std::string msg =
                  r.finish_reason == finish::error ? r.error : "the request was cancelled";
              if (!write_event(sink, dump_json(openai_error(ApiError(500, "generation", msg)))))
                return false;
            } else if (r.tokens.empty()) {  // max_tokens = 0: one chunk with the reason
              json ch = openai_chunk(*c, id, created);
              ch["choices"] = json::array({{{"index", i},
                                            {"text", c->echo ? prompt_text : ""},
                                            {"logprobs", nullptr},
                                            {"finish_reason", openai_finish(r.finish_reason)}}});
              if (!write_event(sink, dump_json(ch))) return false;
            }
          }
          if (c->include_usage) {
            json ch = openai_chunk(*c, id, created);
            ch["choices"] = json::array();
            ch["usage"] = openai_usage(rs);
            if (!write_event(sink, dump_json(ch))) return false;
          }
          return write_event(sink, "[DONE]");
        });
  }

  ServerCore& core_;
};

}  // namespace servekit::serve::http
