// SPDX-License-Identifier: Apache-2.0
#pragma once
// The text-generation-inference / LoRAX routes: POST /generate (one answer), /generate_stream
// (server-sent events) and / (where LoRAX's and TGI's Python clients post; "stream" in the
// body picks the answer), and GET /info. tgi.hpp parses the requests and spells the answers;
// this admits, submits and answers them through the server's ServerCore.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "servekit/serve/http/event_stream.hpp"
#include "servekit/serve/http/identity.hpp"
#include "servekit/serve/http/server_core.hpp"
#include "servekit/serve/http/tgi.hpp"

namespace servekit::serve::http {

class TgiRoutes {
 public:
  explicit TgiRoutes(ServerCore& core) : core_(core) {}

  // route: the path, for the log line. stream: answer with events. compat: POST /, where the
  // body's "stream" decides and an unstreamed answer is a one-element list.
  void generate(const HttpRequest& q, HttpResponse& res, const char* route, bool stream,
                bool compat) {
    try {
      auto ticket = core_.admit();
      GenerateCall c;
      try {
        c = parse_generate(parse_body(q.body), core_.opt().limits);
        check_adapter(c.req.adapter, c.adapter_source);
        if (compat) stream = c.stream;
        if (stream && c.req.prompt_logprobs >= 0)  // as text-generation-inference answers
          throw ApiError(422, "validation",
                         "`parameters.decoder_input_details` = true is not supported when "
                         "streaming tokens");
      } catch (const ApiError& e) {
        core_.reject(e.type);
        throw;
      }
      if (c.sampling && !c.seeded) c.req.sampling.seed = core_.draw_seed();
      if (c.truncate) {
        auto ids = core_.tok().encode(c.req.prompt);
        if (static_cast<int>(ids.size()) > *c.truncate)
          ids.erase(ids.begin(), ids.end() - *c.truncate);
        c.req.prompt_ids = std::move(ids);
      }
      auto job = std::make_shared<Job>();
      job->ticket = std::move(ticket);
      job->route = route;
      job->prompt_text = c.req.prompt;
      job->adapter = c.req.adapter.value_or("");
      core_.submit(c.req, *job);
      if (stream) return generate_stream(res, std::make_shared<GenerateCall>(std::move(c)), job);
      const Result& r = core_.wait(*job);
      core_.finished(*job, r, job->adapter, false);
      core_.throw_if_failed(r);
      json body = tgi_response(c, {r, job->flow->pieces, core_.tok().eos_id(),
                                   [this](int32_t id) { return core_.token_text(id); }});
      if (compat) body = json::array({body});
      timing_headers(res, r);
      res.set_content(dump_json(body), "application/json");
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  }

  // GET /info: the model and the server's limits, as TGI's router describes itself.
  json info() const {
    const HttpOptions& opt = core_.opt();
    const EngineRef& engine = core_.engine();
    const EngineIdentity& id = engine.identity();
    json j = {{"model_id", opt.model_id},
              {"model_sha", nullptr},
              {"model_dtype", dtype_name(id.weights)},
              {"model_device_type", id.backend == "cuda" ? "cuda" : "cpu"},
              {"model_pipeline_tag", "text-generation"},
              {"max_concurrent_requests", opt.max_pending},
              {"max_best_of", 1},
              {"max_stop_sequences", opt.limits.max_stop},
              {"max_input_length", id.max_positions},
              {"max_total_tokens", id.max_positions},
              {"max_batch_size", engine.options().max_batch},
              {"max_batch_total_tokens", engine.options().max_batched_tokens},
              {"validation_workers", 0},
              {"version", opt.version},
              {"sha", nullptr},
              {"docker_label", nullptr},
              {"router", "servekit"},
              {"engine", id.engine},
              {"lora", id.lora_enabled},
              {"adapters", core_.adapter_ids()}};
    j.update(identity_json(engine, opt.device));
    return j;
  }

 private:
  using Job = ServerCore::Job;

  // Checks the adapter a request names against what this server may load.
  void check_adapter(const std::optional<std::string>& id, const std::optional<std::string>& src) {
    if (!id) return;
    if (!core_.engine().identity().lora_enabled) {
      throw ApiError(422, "validation",
                     detail::cat("adapter '", id->substr(0, 80), "': this server runs ",
                                 core_.engine().identity().engine, ", a model without LoRA"));
    } else {
      if (src && *src == "local") {
        if (!core_.opt().adapter_paths)
          throw ApiError(422, "validation",
                         "adapter_source \"local\" is turned off on this server");
        if (!std::filesystem::is_directory(*id))
          throw ApiError(424, "generation",
                         detail::cat("adapter '", id->substr(0, 200), "': no such folder"));
        return;
      }
      if (!core_.engine().adapter_registered(*id)) {
        std::string known;
        for (const auto& a : core_.engine().adapter_ids()) known += (known.empty() ? "" : ", ") + a;
        throw ApiError(
            424, "generation",
            detail::cat("adapter '", id->substr(0, 200),
                        "' is not known to this server (known: ", known.empty() ? "none" : known,
                        "; adapter_source \"local\" loads a folder)"));
      }
    }
  }

  // TGI's x-* headers on an unstreamed answer: where the request's time went.
  static void timing_headers(HttpResponse& res, const Result& r) {
    const auto& m = r.metrics;
    auto ms = [](double v) { return std::to_string(static_cast<long long>(v + 0.5)); };
    res.set_header("x-compute-type", "cpu+servekit");
    res.set_header("x-total-time", ms(m.e2e_ms));
    res.set_header("x-queue-time", ms(m.queue_ms));
    res.set_header("x-inference-time", ms(m.e2e_ms - m.queue_ms));
    res.set_header("x-time-to-first-token", ms(m.ttft_ms));
    res.set_header("x-time-per-token", ms(m.tpot_ms));
    res.set_header("x-prompt-tokens", std::to_string(m.prompt_tokens));
    res.set_header("x-generated-tokens", std::to_string(r.tokens.size()));
  }

  // One event per token, the last with the whole text; a failed or cancelled request ends
  // with an error event.
  void generate_stream(HttpResponse& res, std::shared_ptr<GenerateCall> c,
                       std::shared_ptr<Job> job) {
    const int32_t eos = core_.tok().eos_id();
    stream_flow(
        core_, res, job,
        [this, c, eos](Sink& sink, const GeneratedToken& t, const std::string& piece,
                       const Result* last) {
          std::vector<std::string> alts;
          for (const auto& a : t.top) alts.push_back(core_.token_text(a.id));
          return write_event(sink, dump_json(tgi_stream_event(*c, t, piece, eos, last, alts)));
        },
        [](Sink& sink, const Result& r) {
          if (r.finish_reason == finish::error)
            return write_event(sink, dump_json({{"error", r.error}, {"error_type", "generation"}}));
          if (r.finish_reason == finish::cancelled)
            return write_event(sink, dump_json({{"error", "the request was cancelled"},
                                                {"error_type", "generation"}}));
          return true;
        });
  }

  ServerCore& core_;
};

}  // namespace servekit::serve::http
