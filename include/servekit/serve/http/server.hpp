// SPDX-License-Identifier: Apache-2.0
#pragma once
// HttpServer: an engine behind HTTP, speaking the text-generation-inference / LoRAX API
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
//
// This file is the transport: the listener, its threads and limits, the route table, and the
// answers httplib itself gives. What the routes share (options, admission, a request's life)
// is ServerCore (server_core.hpp); the routes are in tgi_routes.hpp and openai_routes.hpp,
// the /metrics page in metrics.hpp.
#include <httplib.h>

#include <atomic>
#include <concepts>
#include <memory>
#include <chrono>
#include <exception>
#include <string>

#include "servekit/serve/http/api_error.hpp"
#include "servekit/serve/http/elastic_pool.hpp"
#include "servekit/serve/http/json_fields.hpp"
#include "servekit/serve/http/metrics.hpp"
#include "servekit/serve/http/openai_routes.hpp"
#include "servekit/serve/http/server_core.hpp"
#include "servekit/serve/http/tgi_routes.hpp"
#include "servekit/text/tokenizer.hpp"

namespace servekit::serve::http {

class HttpServer {
 public:
  // Any engine, seen through serve::EngineRef (engine_ref.hpp), so that the server is compiled
  // once whatever the composition. The engine must outlive the server.
  template <class Engine>
  requires(!std::derived_from<Engine, EngineRef>)
      HttpServer(Engine& engine, const text::Gpt2Tokenizer& tok, HttpOptions opt = {})
      : own_(std::make_unique<EngineRefOf<Engine>>(engine)),
        core_(*own_, tok, std::move(opt)),
        tgi_(core_),
        openai_(core_) {
    setup();
  }
  HttpServer(EngineRef& engine, const text::Gpt2Tokenizer& tok, HttpOptions opt = {})
      : core_(engine, tok, std::move(opt)), tgi_(core_), openai_(core_) {
    setup();
  }
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  ~HttpServer() { stop(); }

  // Binds the listening socket; returns the port (the chosen one for port 0).
  int bind() {
    const HttpOptions& o = core_.opt();
    if (o.port == 0) {
      port_ = svr_.bind_to_any_port(o.host);
      if (port_ < 0) fail("http: cannot bind ", o.host, " to any port");
    } else {
      if (!svr_.bind_to_port(o.host, o.port))
        fail("http: cannot bind ", o.host, ":", o.port,
             " (in use, or not an address of this machine)");
      port_ = o.port;
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
    core_.drain();
    svr_.stop();
  }

  // Requests admitted and not yet answered.
  int admitted() const { return core_.admitted(); }

 private:
  void setup() {
    const HttpOptions& o = core_.opt();
    // A connection holds a thread while its request runs: room for every admitted request
    // plus a few for the 429s, /health and /metrics that must still be answered.
    const std::size_t threads = static_cast<std::size_t>(o.max_pending) + 16;
    // Started as connections come and ended after 5 s without one, so an idle server gives
    // the stacks of a busy hour back.
    svr_.new_task_queue = [threads] { return new ElasticPool(threads, std::chrono::seconds(5)); };
    svr_.set_payload_max_length(o.max_body_bytes);
    svr_.set_keep_alive_timeout(2);
    svr_.set_tcp_nodelay(true);  // one small event per token: do not wait to fill a segment
    routes();
  }

  void routes() {
    svr_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (core_.draining())
        return send_error(res, ApiError(503, "unavailable", "the server is shutting down"));
      res.set_content("{}", "application/json");
    });
    svr_.Get("/info", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(dump_json(tgi_.info()), "application/json");
    });
    svr_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(
          metrics_text(core_.engine(), core_.admitted(), core_.metrics(), core_.opt().device),
          "text/plain; version=0.0.4");
    });
    svr_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(dump_json(openai_.models()), "application/json");
    });
    svr_.Post("/generate", [this](const httplib::Request& q, httplib::Response& res) {
      tgi_.generate(q, res, "/generate", false, false);
    });
    svr_.Post("/generate_stream", [this](const httplib::Request& q, httplib::Response& res) {
      tgi_.generate(q, res, "/generate_stream", true, false);
    });
    // LoRAX's and TGI's Python clients post here; "stream" in the body picks the answer.
    svr_.Post("/", [this](const httplib::Request& q, httplib::Response& res) {
      tgi_.generate(q, res, "/", false, true);
    });
    svr_.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& res) {
      openai_.completions(q, res);
    });
    svr_.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "unknown error";
          try {
            std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          send_error(res, ApiError(500, "generation", what));
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

  // Declared in this order so the routes, which hold the core, are built after it and the
  // listener, whose threads run the routes, is destroyed before them.
  std::unique_ptr<EngineRef> own_;  // the template constructor's view of its engine
  ServerCore core_;
  TgiRoutes tgi_;
  OpenAiRoutes openai_;
  httplib::Server svr_;
  int port_ = -1;
  std::atomic<bool> stopped_{false};
};

}  // namespace servekit::serve::http
