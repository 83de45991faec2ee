// SPDX-License-Identifier: Apache-2.0
#pragma once
// HttpServer<Engine>: an engine behind HTTP, speaking the text-generation-inference / LoRAX API
// (POST /generate, /generate_stream and /, GET /info, /health) and OpenAI's completions API
// (POST /v1/completions, GET /v1/models), with Prometheus metrics on GET /metrics.
//
// Each connection has a thread (cpp-httplib's pool); every request goes to the one engine,
// so requests from all connections share its steps (continuous batching across clients). The
// engine thread hands each token to the request's Flow; the connection thread waiting on it
// writes the token out (a server-sent event) or, unstreamed, the whole answer at the end.
//
//   serve::Engine<Model> engine(model, tok, {.max_batch = 32});
//   serve::http::HttpServer server(engine, tok, {.port = 8080});
//   server.bind();
//   server.run();  // until server.stop(), e.g. from a signal-handling thread
//
// Bounds: at most max_pending requests are admitted at once (waiting or running), the rest get
// 429 at once; bodies over max_body_bytes get 413. A client that goes away mid-stream cancels
// its request, which frees its cache blocks at the engine's next step. stop() refuses new
// requests (503), lets admitted ones finish for up to shutdown_grace_s, cancels the rest, then
// closes the listener.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "servekit/serve/engine.hpp"
#include "servekit/serve/http/api_error.hpp"
#include "servekit/serve/http/elastic_pool.hpp"
#include "servekit/serve/http/json_fields.hpp"
#include "servekit/serve/http/openai.hpp"
#include "servekit/serve/http/prometheus.hpp"
#include "servekit/serve/http/tgi.hpp"
#include "servekit/text/tokenizer.hpp"

namespace servekit::serve::http {

struct HttpOptions {
  std::string host = "127.0.0.1";  // loopback only unless asked
  int port = 8080;                 // 0: any free port (bind() says which)
  std::string model_id = "gpt2";   // the base model's name in /info, /v1/models and `model`
  int max_pending = 128;           // admitted requests (waiting + running); more get 429
  std::size_t max_body_bytes = std::size_t{1} << 20;
  double shutdown_grace_s = 10;  // stop(): how long admitted requests may still run
  bool adapter_paths = true;     // adapter_source "local": a request may name a folder
  bool log_requests = true;      // one line per request on stderr
  std::string version = "0";
  ApiLimits limits;
};

// What one request's connection waits on; the engine thread fills it.
struct Flow {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> pieces;  // one per generated token (may be empty: held back)
  std::vector<GeneratedToken> tokens;
  bool ended = false;
  std::atomic<bool> abandoned{false};  // the client went away: cancel at the next token
};

template <class Engine>
class HttpServer {
 public:
  HttpServer(Engine& engine, const text::Gpt2Tokenizer& tok, HttpOptions opt = {})
      : engine_(engine), tok_(tok), opt_(std::move(opt)), seeds_(std::random_device{}()) {
    if (opt_.max_pending < 1) fail("http: max_pending must be >= 1, got ", opt_.max_pending);
    // A connection holds a thread while its request runs: room for every admitted request
    // plus a few for the 429s, /health and /metrics that must still be answered.
    const std::size_t threads = static_cast<std::size_t>(opt_.max_pending) + 16;
    // Started as connections come and ended after 5 s without one, so an idle server gives
    // the stacks of a busy hour back.
    svr_.new_task_queue = [threads] { return new ElasticPool(threads, std::chrono::seconds(5)); };
    svr_.set_payload_max_length(opt_.max_body_bytes);
    svr_.set_keep_alive_timeout(2);
    svr_.set_tcp_nodelay(true);  // one small event per token: do not wait to fill a segment
    routes();
  }
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  ~HttpServer() { stop(); }

  // Binds the listening socket; returns the port (the chosen one for port 0).
  int bind() {
    if (opt_.port == 0) {
      port_ = svr_.bind_to_any_port(opt_.host);
      if (port_ < 0) fail("http: cannot bind ", opt_.host, " to any port");
    } else {
      if (!svr_.bind_to_port(opt_.host, opt_.port))
        fail("http: cannot bind ", opt_.host, ":", opt_.port,
             " (in use, or not an address of this machine)");
      port_ = opt_.port;
    }
    return port_;
  }
  int port() const { return port_; }

  // Serves until stop(). bind() first.
  void run() { svr_.listen_after_bind(); }

  // Graceful: new requests get 503, admitted ones run for up to shutdown_grace_s, then what
  // is left is cancelled and the listener closes. Any thread; idempotent.
  void stop() {
    if (stopped_.exchange(true)) return;
    draining_ = true;
    std::unique_lock lk(mu_);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(opt_.shutdown_grace_s);
    idle_cv_.wait_until(lk, deadline, [&] { return admitted_ == 0; });
    for (uint64_t id : live_) engine_.cancel(id);
    idle_cv_.wait_for(lk, std::chrono::seconds(30), [&] { return admitted_ == 0; });
    lk.unlock();
    svr_.stop();
  }

  // Requests admitted and not yet answered.
  int admitted() const {
    std::lock_guard lk(mu_);
    return admitted_;
  }

 private:
  using Clock = std::chrono::steady_clock;

  // An admitted request's place; given back when its response is done, whatever happened.
  struct Ticket {
    HttpServer* s;
    explicit Ticket(HttpServer* srv) : s(srv) {}
    ~Ticket() {
      {
        std::lock_guard lk(s->mu_);
        s->admitted_--;
      }
      s->idle_cv_.notify_all();
    }
  };

  // What the server submits: the request, and how its answer is to be written.
  struct Job {
    std::shared_ptr<Flow> flow = std::make_shared<Flow>();
    std::shared_ptr<Ticket> ticket;
    RequestHandle handle;
    std::string route, adapter, prompt_text;
  };

  void routes() {
    svr_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (draining_) return error(res, ApiError(503, "unavailable", "the server is shutting down"));
      res.set_content("{}", "application/json");
    });
    svr_.Get("/info", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(dump_json(info()), "application/json");
    });
    svr_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_text(), "text/plain; version=0.0.4");
    });
    svr_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(dump_json(models()), "application/json");
    });
    svr_.Post("/generate", [this](const httplib::Request& q, httplib::Response& res) {
      tgi(q, res, "/generate", false, false);
    });
    svr_.Post("/generate_stream", [this](const httplib::Request& q, httplib::Response& res) {
      tgi(q, res, "/generate_stream", true, false);
    });
    // LoRAX's and TGI's Python clients post here; "stream" in the body picks the answer.
    svr_.Post("/", [this](const httplib::Request& q, httplib::Response& res) {
      tgi(q, res, "/", false, true);
    });
    svr_.Post("/v1/completions",
              [this](const httplib::Request& q, httplib::Response& res) { completions(q, res); });
    svr_.set_exception_handler(
        [this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "unknown error";
          try {
            std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          error(res, ApiError(500, "generation", what));
        });
    // httplib's own refusals (404, 413, 400) get a JSON body too.
    svr_.set_error_handler([](const httplib::Request& q, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string msg = res.status == 404   ? "no route " + q.method + " " + q.path.substr(0, 80)
                        : res.status == 413 ? "the body is too large"
                                            : "bad request";
      res.set_content(dump_json({{"error", msg}, {"error_type", "validation"}}),
                      "application/json");
    });
  }

  static void error(httplib::Response& res, const ApiError& e, bool openai = false) {
    res.status = openai && e.status == 422 ? 400 : e.status;
    json body = openai ? openai_error(ApiError(res.status, e.type, e.what()))
                       : json{{"error", e.what()}, {"error_type", e.type}};
    res.set_content(dump_json(body), "application/json");
  }

  // ---- admission -----------------------------------------------------------------------

  std::shared_ptr<Ticket> admit() {
    if (draining_) throw ApiError(503, "unavailable", "the server is shutting down");
    std::lock_guard lk(mu_);
    if (admitted_ >= opt_.max_pending) {
      rejected_.add("overloaded");
      throw ApiError(429, "overloaded",
                     detail::cat("the server has ", admitted_,
                                 " requests (max_pending = ", opt_.max_pending, "); retry later"));
    }
    admitted_++;
    return std::make_shared<Ticket>(this);
  }

  // Checks the adapter a request names against what this server may load.
  void check_adapter(const std::optional<std::string>& id, const std::optional<std::string>& src) {
    if (!id) return;
    if constexpr (!Engine::kLora) {
      throw ApiError(422, "validation",
                     detail::cat("adapter '", id->substr(0, 80), "': this server runs ",
                                 Engine::name(), ", a model without LoRA"));
    } else {
      if (src && *src == "local") {
        if (!opt_.adapter_paths)
          throw ApiError(422, "validation",
                         "adapter_source \"local\" is turned off on this server");
        if (!std::filesystem::is_directory(*id))
          throw ApiError(424, "generation",
                         detail::cat("adapter '", id->substr(0, 200), "': no such folder"));
        return;
      }
      if (!engine_.adapters().registered(*id)) {
        std::string known;
        for (const auto& a : engine_.adapters().ids()) known += (known.empty() ? "" : ", ") + a;
        throw ApiError(
            424, "generation",
            detail::cat("adapter '", id->substr(0, 200),
                        "' is not known to this server (known: ", known.empty() ? "none" : known,
                        "; adapter_source \"local\" loads a folder)"));
      }
    }
  }

  // Submits r with the hooks that feed job's flow; servekit::Error (the engine's checks) is a
  // 422 that quotes it.
  void submit(Request r, Job& job) {
    auto flow = job.flow;
    r.on_piece = [flow](std::string_view piece, const GeneratedToken& t) {
      {
        std::lock_guard lk(flow->mu);
        flow->pieces.emplace_back(piece);
        flow->tokens.push_back(t);
      }
      flow->cv.notify_all();
      return !flow->abandoned.load();
    };
    r.on_end = [flow] {
      {
        std::lock_guard lk(flow->mu);
        flow->ended = true;
      }
      flow->cv.notify_all();
    };
    try {
      job.handle = engine_.submit(std::move(r));
    } catch (const Error& e) {
      rejected_add("validation");
      throw ApiError(422, "validation", e.what());
    }
    std::lock_guard lk(mu_);
    live_.insert(job.handle.id);
  }

  void rejected_add(const std::string& why) {
    std::lock_guard lk(mu_);
    rejected_.add(why);
  }

  // Blocks until the request has ended; its result.
  const Result& wait(Job& job) {
    {
      std::unique_lock lk(job.flow->mu);
      job.flow->cv.wait(lk, [&] { return job.flow->ended; });
    }
    return job.handle.done->wait();
  }

  // The client went away: cancel its request (at its next token), wait for the engine to
  // retire it, and count it as aborted.
  void abandon(Job& job) {
    job.flow->abandoned = true;
    engine_.cancel(job.handle.id);
    finished(job, wait(job), job.adapter, true);
  }

  // Bookkeeping once a request has ended: metrics, the log line.
  void finished(const Job& job, const Result& r, const std::string& adapter, bool gone) {
    {
      std::lock_guard lk(mu_);
      live_.erase(job.handle.id);
      // vLLM's labels: stop (EOS or a stop string), length, abort; and error.
      const std::string& f = r.finish_reason;
      success_.add(gone || f == finish::cancelled          ? "abort"
                   : f == finish::eos || f == finish::stop ? "stop"
                   : f == finish::error                    ? "error"
                                                           : "length");
      prompt_tokens_ += r.metrics.prompt_tokens;
      generation_tokens_ += static_cast<double>(r.tokens.size());
      if (!r.tokens.empty()) ttft_.observe(r.metrics.ttft_ms / 1e3);
      for (double g : r.metrics.gaps_ms) tpot_.observe(g / 1e3);
      e2e_.observe(r.metrics.e2e_ms / 1e3);
      queue_.observe(r.metrics.queue_ms / 1e3);
      if (!adapter.empty()) adapter_requests_.add(adapter);
    }
    if (opt_.log_requests)
      std::fprintf(stderr,
                   "servekit serve: %s id=%llu adapter=%s prompt=%d generated=%zu ttft=%.1fms "
                   "tpot=%.2fms e2e=%.1fms finish=%s%s\n",
                   job.route.c_str(), static_cast<unsigned long long>(job.handle.id),
                   adapter.empty() ? "-" : adapter.c_str(), r.metrics.prompt_tokens,
                   r.tokens.size(), r.metrics.ttft_ms, r.metrics.tpot_ms, r.metrics.e2e_ms,
                   r.finish_reason.c_str(), gone ? " (client went away)" : "");
  }

  uint64_t draw_seed() {
    std::lock_guard lk(mu_);
    return seeds_();
  }

  std::string token_text(int32_t id) const { return tok_.token_bytes(id); }

  // A result that is an error (a bad adapter, a throwing step) as the API's error.
  static void throw_if_failed(const Result& r) {
    if (r.finish_reason == finish::error) throw ApiError(424, "generation", r.error);
    if (r.finish_reason == finish::cancelled && r.tokens.empty())
      throw ApiError(503, "unavailable", "the request was cancelled: the server is shutting down");
  }

  // ---- the TGI / LoRAX routes ----------------------------------------------------------

  void tgi(const httplib::Request& q, httplib::Response& res, const char* route, bool stream,
           bool compat) {
    try {
      auto ticket = admit();
      GenerateCall c;
      try {
        c = parse_generate(parse_body(q.body), opt_.limits);
        check_adapter(c.req.adapter, c.adapter_source);
      } catch (const ApiError& e) {
        rejected_add(e.type);
        throw;
      }
      if (compat) stream = c.stream;
      if (c.sampling && !c.seeded) c.req.sampling.seed = draw_seed();
      if (c.truncate) {
        auto ids = tok_.encode(c.req.prompt);
        if (static_cast<int>(ids.size()) > *c.truncate)
          ids.erase(ids.begin(), ids.end() - *c.truncate);
        c.req.prompt_ids = std::move(ids);
      }
      auto job = std::make_shared<Job>();
      job->ticket = std::move(ticket);
      job->route = route;
      job->prompt_text = c.req.prompt;
      job->adapter = c.req.adapter.value_or("");
      submit(c.req, *job);
      if (stream) return tgi_stream(res, std::make_shared<GenerateCall>(std::move(c)), job);
      const Result& r = wait(*job);
      finished(*job, r, job->adapter, false);
      throw_if_failed(r);
      json body = tgi_response(
          c, {r, job->flow->pieces, tok_.eos_id(), [this](int32_t id) { return token_text(id); }});
      if (compat) body = json::array({body});
      timing_headers(res, r);
      res.set_content(dump_json(body), "application/json");
    } catch (const ApiError& e) {
      error(res, e);
    }
  }

  static void timing_headers(httplib::Response& res, const Result& r) {
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

  // Writes `data:{json}\n\n`; false if the client is gone.
  static bool event(httplib::DataSink& sink, const std::string& data) {
    const std::string s = "data:" + data + "\n\n";
    return sink.write(s.data(), s.size());
  }

  // Runs the stream on the connection's thread: httplib calls the provider once and it writes
  // every event. Events are written as the engine streams tokens; the one marked `ends` waits
  // for the result, which the engine sets right after.
  template <class WriteToken, class WriteEnd>
  void stream_flow(httplib::Response& res, std::shared_ptr<Job> job, WriteToken on_token,
                   WriteEnd on_end) {
    auto done = std::make_shared<std::atomic<bool>>(false);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, job, on_token, on_end, done](std::size_t, httplib::DataSink& sink) {
          Flow& f = *job->flow;
          std::size_t sent = 0;
          bool ok = true;
          const Result* last = nullptr;  // set with the token that ended the request
          while (ok) {
            std::unique_lock lk(f.mu);
            f.cv.wait(lk, [&] { return f.ended || f.tokens.size() > sent; });
            if (f.tokens.size() > sent) {
              const GeneratedToken t = f.tokens[sent];
              const std::string piece = f.pieces[sent];
              if (t.ends && !f.ended) {  // the result comes right after this token
                f.cv.wait(lk, [&] { return f.ended; });
              }
              lk.unlock();
              if (t.ends) last = &job->handle.done->wait();
              ok = on_token(sink, t, piece, t.ends ? last : nullptr);
              sent++;
              if (last) break;
              continue;
            }
            lk.unlock();
            break;  // ended without a final token: cancelled or failed
          }
          if (!ok) {
            done->store(true);
            // Gone after the last token: the request had ended on its own, only the delivery
            // failed. Gone before: cancel it, which frees its cache now.
            if (last)
              finished(*job, *last, job->adapter, false);
            else
              abandon(*job);
            return false;
          }
          const Result& r = job->handle.done->wait();
          ok = on_end(sink, r);
          done->store(true);
          finished(*job, r, job->adapter, !ok);
          // The request stops counting as admitted before its last byte is written: a client
          // that has read the whole answer must not see it in num_requests_admitted.
          job->ticket.reset();
          if (ok) sink.done();
          return ok;
        },
        [this, job, done](bool) {
          // The connection closed before the provider ran: cancel so nothing keeps running.
          if (!done->exchange(true)) abandon(*job);
        });
  }

  void tgi_stream(httplib::Response& res, std::shared_ptr<GenerateCall> c,
                  std::shared_ptr<Job> job) {
    const int32_t eos = tok_.eos_id();
    stream_flow(
        res, job,
        [this, c, eos](httplib::DataSink& sink, const GeneratedToken& t, const std::string& piece,
                       const Result* last) {
          std::vector<std::string> alts;
          for (const auto& a : t.top) alts.push_back(token_text(a.id));
          return event(sink, dump_json(tgi_stream_event(*c, t, piece, eos, last, alts)));
        },
        [](httplib::DataSink& sink, const Result& r) {
          if (r.finish_reason == finish::error)
            return event(sink, dump_json({{"error", r.error}, {"error_type", "generation"}}));
          if (r.finish_reason == finish::cancelled)
            return event(sink, dump_json({{"error", "the request was cancelled"},
                                          {"error_type", "generation"}}));
          return true;
        });
  }

  // ---- OpenAI --------------------------------------------------------------------------

  void completions(const httplib::Request& q, httplib::Response& res) {
    try {
      auto ticket = admit();
      CompletionCall c;
      try {
        c = parse_completion(parse_body(q.body), opt_.limits);
      } catch (const ApiError& e) {
        rejected_add(e.type);
        throw;
      }
      if (c.model != opt_.model_id) {
        bool known = false;
        if constexpr (Engine::kLora) known = engine_.adapters().registered(c.model);
        if (!known) {
          rejected_add("not_found");
          throw ApiError(404, "not_found",
                         detail::cat("the model `", c.model.substr(0, 80),
                                     "` does not exist (GET /v1/models lists them)"));
        }
        c.req.adapter = c.model;
      }
      if (c.sampling && !c.seeded) c.req.sampling.seed = draw_seed();
      std::string prompt_text = c.req.prompt.empty() ? tok_.decode(c.req.prompt_ids) : c.req.prompt;
      auto job = std::make_shared<Job>();
      job->ticket = std::move(ticket);
      job->route = "/v1/completions";
      job->adapter = c.req.adapter.value_or("");
      job->prompt_text = prompt_text;
      submit(c.req, *job);
      const int64_t created = unix_now();
      if (c.stream)
        return openai_stream(res, std::make_shared<CompletionCall>(std::move(c)), job, created);
      const Result& r = wait(*job);
      finished(*job, r, job->adapter, false);
      throw_if_failed(r);
      json body = openai_response(
          c, {r, job->flow->pieces, tok_.eos_id(), [this](int32_t id) { return token_text(id); }},
          created, prompt_text);
      res.set_content(dump_json(body), "application/json");
    } catch (const ApiError& e) {
      error(res, e, true);
    }
  }

  void openai_stream(httplib::Response& res, std::shared_ptr<CompletionCall> c,
                     std::shared_ptr<Job> job, int64_t created) {
    auto offset = std::make_shared<std::size_t>(c->echo ? job->prompt_text.size() : 0);
    auto first = std::make_shared<bool>(true);
    stream_flow(
        res, job,
        [this, c, job, created, offset, first](httplib::DataSink& sink, const GeneratedToken& t,
                                               const std::string& piece, const Result* last) {
          json ch = openai_chunk(*c, job->handle.id, created);
          std::string text = (*first && c->echo ? job->prompt_text : "") + piece;
          *first = false;
          json choice = {
              {"index", 0},
              {"text", text},
              {"logprobs", nullptr},
              {"finish_reason", last ? json(openai_finish(last->finish_reason)) : json(nullptr)}};
          if (c->logprobs >= 0) {
            json top = json::object();
            for (const auto& a : t.top) top[token_text(a.id)] = a.logprob;
            choice["logprobs"] = {{"tokens", {piece}},
                                  {"token_logprobs", {t.logprob}},
                                  {"top_logprobs", {top}},
                                  {"text_offset", {*offset + text.size() - piece.size()}}};
          }
          *offset += text.size();
          ch["choices"] = json::array({choice});
          return event(sink, dump_json(ch));
        },
        [c, job, created](httplib::DataSink& sink, const Result& r) {
          if (r.finish_reason == finish::error || r.finish_reason == finish::cancelled) {
            const std::string msg =
                r.finish_reason == finish::error ? r.error : "the request was cancelled";
            if (!event(sink, dump_json(openai_error(ApiError(500, "generation", msg)))))
              return false;
          } else if (r.tokens.empty()) {  // max_tokens = 0: one chunk with the reason
            json ch = openai_chunk(*c, job->handle.id, created);
            ch["choices"] = json::array({{{"index", 0},
                                          {"text", c->echo ? job->prompt_text : ""},
                                          {"logprobs", nullptr},
                                          {"finish_reason", openai_finish(r.finish_reason)}}});
            if (!event(sink, dump_json(ch))) return false;
          }
          if (c->include_usage) {
            json ch = openai_chunk(*c, job->handle.id, created);
            ch["choices"] = json::array();
            ch["usage"] = openai_usage(r);
            if (!event(sink, dump_json(ch))) return false;
          }
          return event(sink, "[DONE]");
        });
  }

  // ---- GET routes ----------------------------------------------------------------------

  std::vector<std::string> adapter_ids() const {
    if constexpr (Engine::kLora) return engine_.adapters().ids();
    return {};
  }

  json info() const {
    return {{"model_id", opt_.model_id},
            {"model_sha", nullptr},
            {"model_dtype", "float32"},
            {"model_device_type", "cpu"},
            {"model_pipeline_tag", "text-generation"},
            {"max_concurrent_requests", opt_.max_pending},
            {"max_best_of", 1},
            {"max_stop_sequences", opt_.limits.max_stop},
            {"max_input_length", Engine::P},
            {"max_total_tokens", Engine::P},
            {"max_batch_size", engine_.options().max_batch},
            {"max_batch_total_tokens", engine_.options().max_batched_tokens},
            {"validation_workers", 0},
            {"version", opt_.version},
            {"sha", nullptr},
            {"docker_label", nullptr},
            {"router", "servekit"},
            {"engine", Engine::name()},
            {"lora", Engine::kLora},
            {"adapters", adapter_ids()}};
  }

  json models() const {
    const int64_t t = unix_now();
    json data = json::array();
    data.push_back({{"id", opt_.model_id},
                    {"object", "model"},
                    {"created", t},
                    {"owned_by", "servekit"},
                    {"root", opt_.model_id},
                    {"parent", nullptr}});
    for (const auto& a : adapter_ids())
      data.push_back({{"id", a},
                      {"object", "model"},
                      {"created", t},
                      {"owned_by", "servekit"},
                      {"root", a},
                      {"parent", opt_.model_id}});
    return {{"object", "list"}, {"data", data}};
  }

  std::string metrics_text() const {
    const EngineStats s = engine_.stats();
    std::string o;
    auto gauge = [&](const char* name, const char* help, double v) {
      prom_family(o, name, "gauge", help);
      prom_sample(o, name, v);
    };
    auto counter = [&](const char* name, const char* help, double v) {
      prom_family(o, name, "counter", help);
      prom_sample(o, name, v);
    };
    gauge("servekit:num_requests_running", "Requests in the engine's running batch.",
          static_cast<double>(s.running));
    gauge("servekit:num_requests_waiting", "Requests waiting to be scheduled.",
          static_cast<double>(s.waiting));
    gauge("servekit:num_requests_admitted",
          "Requests the server holds (waiting + running + "
          "being answered).",
          admitted());
    const double usage =
        s.cache_blocks > 0 ? 1.0 - static_cast<double>(s.cache_blocks_free) / s.cache_blocks
                           : (s.slots > 0 ? 1.0 - static_cast<double>(s.slots_free) / s.slots : 0);
    gauge("servekit:kv_cache_usage_perc", "KV-cache usage: 1 means the cache is full.", usage);
    counter("servekit:num_preemptions_total", "Sequences preempted (their cache taken back).",
            static_cast<double>(s.preemptions));
    counter("servekit:engine_steps_total", "Forward passes the engine has run.",
            static_cast<double>(s.steps));
    {
      std::lock_guard lk(mu_);
      success_.render(o, "servekit:request_success_total",
                      "Requests that ended, by finish reason (abort: the client went away).");
      rejected_.render(o, "servekit:request_rejected_total",
                       "Requests refused before running, by error type.");
      counter("servekit:prompt_tokens_total", "Prompt tokens of the requests that ended.",
              prompt_tokens_);
      counter("servekit:generation_tokens_total", "Tokens generated by the requests that ended.",
              generation_tokens_);
      ttft_.render(o, "servekit:time_to_first_token_seconds", "Time to the first token.");
      tpot_.render(o, "servekit:time_per_output_token_seconds", "Gaps between generated tokens.");
      e2e_.render(o, "servekit:e2e_request_latency_seconds", "Submission to the last token.");
      queue_.render(o, "servekit:request_queue_time_seconds", "Submission to first scheduled.");
      adapter_requests_.render(o, "servekit:adapter_requests_total",
                               "Requests that ended, by LoRA adapter.");
    }
    if constexpr (Engine::kLora) {
      const auto& a = s.adapters;
      counter("servekit:adapter_host_hits_total", "Adapter fetches served from host memory.",
              static_cast<double>(a.host.host_hits));
      counter("servekit:adapter_host_misses_total", "Adapter fetches that started a disk load.",
              static_cast<double>(a.host.host_misses));
      counter("servekit:adapter_disk_loads_total", "Adapters read from disk.",
              static_cast<double>(a.host.disk_loads));
      counter("servekit:adapter_load_failures_total", "Adapter loads that failed.",
              static_cast<double>(a.host.load_failures));
      counter("servekit:adapter_device_hits_total", "Requests whose adapter was in a model slot.",
              static_cast<double>(a.device.hits));
      counter("servekit:adapter_device_misses_total", "Requests whose adapter had to be placed.",
              static_cast<double>(a.device.misses));
      counter("servekit:adapter_uploads_total", "Adapters placed in the model's slots.",
              static_cast<double>(a.device.uploads));
      gauge("servekit:adapters_in_host_memory", "Adapters held in host memory.",
            a.host.host_resident);
      gauge("servekit:num_requests_parked", "Requests waiting for their adapter.",
            static_cast<double>(a.parked));
    }
    return o;
  }

  // TTFT, inter-token and latency buckets as vLLM sets them (seconds).
  static std::vector<double> ttft_buckets() {
    return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
            0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0};
  }
  static std::vector<double> tpot_buckets() {
    return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5};
  }
  static std::vector<double> e2e_buckets() {
    return {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0};
  }

  Engine& engine_;
  const text::Gpt2Tokenizer& tok_;
  HttpOptions opt_;
  httplib::Server svr_;
  int port_ = -1;
  std::atomic<bool> draining_{false}, stopped_{false};

  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  int admitted_ = 0;
  std::set<uint64_t> live_;  // submitted, not yet finished
  std::mt19937_64 seeds_;
  LabeledCounter success_{"finished_reason"}, rejected_{"error_type"}, adapter_requests_{"adapter"};
  double prompt_tokens_ = 0, generation_tokens_ = 0;
  Histogram ttft_{ttft_buckets()}, tpot_{tpot_buckets()}, e2e_{e2e_buckets()},
      queue_{ttft_buckets()};
};

}  // namespace servekit::serve::http
