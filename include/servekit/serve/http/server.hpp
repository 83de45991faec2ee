// SPDX-License-Identifier: Apache-2.0
#pragma once
// HttpServer: an engine behind HTTP, speaking the text-generation-inference / LoRAX API
// (POST /generate, /generate_stream and /, GET /info, /health) and OpenAI's completions API
// (POST /v1/completions, GET /v1/models), with Prometheus metrics on GET /metrics.
//
// A connection holds no thread until it has sent a whole request (transport.hpp, the waiting
// room); a worker then answers it. Every request goes to the one engine, so requests from all
// connections share its steps (continuous batching across clients). The engine thread hands
// each token to the request's Flow; the worker waiting on it writes the token out (a
// server-sent event) or, unstreamed, the whole answer at the end.
//
//   serve::Engine<Model> engine(model, tok, {.max_batch = 32});
//   serve::http::HttpServer server(engine, tok, {.port = 8080});
//   server.bind();
//   server.run();  // until server.stop(), e.g. from a signal-handling thread
//
// Bounds: at most max_pending requests are admitted at once (waiting or running), the rest get
// 429 at once; bodies over max_body_bytes get 413; the waiting room's bounds are in
// transport.hpp. A client that goes away mid-stream cancels its request, which frees its cache
// blocks at the engine's next step. stop() refuses new requests (503), lets admitted ones
// finish for up to shutdown_grace_s, cancels the rest, then closes the listener.
//
// This file is the route table and what the transport is given. What the routes share
// (options, admission, a request's life) is ServerCore (server_core.hpp); the routes are in
// tgi_routes.hpp and openai_routes.hpp, the /metrics page in metrics.hpp.
#include <atomic>
#include <concepts>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "servekit/serve/http/api_error.hpp"
#include "servekit/serve/http/json_fields.hpp"
#include "servekit/serve/http/message.hpp"
#include "servekit/serve/http/metrics.hpp"
#include "servekit/serve/http/openai_routes.hpp"
#include "servekit/serve/http/prometheus.hpp"
#include "servekit/serve/http/server_core.hpp"
#include "servekit/serve/http/tgi_routes.hpp"
#include "servekit/serve/http/transport.hpp"
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
        openai_(core_),
        net_(transport_options(core_.opt()),
             [this](const HttpRequest& q, HttpResponse& res) { handle(q, res); }) {
    routes();
  }
  HttpServer(EngineRef& engine, const text::Gpt2Tokenizer& tok, HttpOptions opt = {})
      : core_(engine, tok, std::move(opt)),
        tgi_(core_),
        openai_(core_),
        net_(transport_options(core_.opt()),
             [this](const HttpRequest& q, HttpResponse& res) { handle(q, res); }) {
    routes();
  }
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  ~HttpServer() { stop(); }

  // Binds the listening socket; returns the port (the chosen one for port 0).
  int bind() { return net_.bind(); }
  int port() const { return net_.port(); }

  // Serves until stop(). bind() first.
  void run() { net_.run(); }

  // Graceful: new requests get 503, admitted ones run for up to shutdown_grace_s, then what
  // is left is cancelled and the listener closes. Any thread; idempotent.
  void stop() {
    if (stopped_.exchange(true)) return;
    core_.drain();
    net_.stop();
  }

  // Requests admitted and not yet answered.
  int admitted() const { return core_.admitted(); }
  const TransportCounts& connections() const { return net_.counts(); }

 private:
  using Route = std::function<void(const HttpRequest&, HttpResponse&)>;

  static TransportOptions transport_options(const HttpOptions& o) {
    TransportOptions t;
    t.host = o.host;
    t.port = o.port;
    t.max_body_bytes = o.max_body_bytes;
    t.read_timeout_s = o.read_timeout_s;
    t.max_waiting_per_peer = o.max_waiting_per_peer;
    // A worker holds a request while it runs: room for every admitted request plus a few
    // for the 429s, /health and /metrics that must still be answered.
    t.threads = static_cast<std::size_t>(o.max_pending) + 16;
    return t;
  }

  void routes() {
    route("GET", "/health", [this](const HttpRequest&, HttpResponse& res) {
      if (core_.draining())
        return send_error(res, ApiError(503, "unavailable", "the server is shutting down"));
      res.set_content("{}", "application/json");
    });
    route("GET", "/info", [this](const HttpRequest&, HttpResponse& res) {
      res.set_content(dump_json(tgi_.info()), "application/json");
    });
    route("GET", "/metrics", [this](const HttpRequest&, HttpResponse& res) {
      res.set_content(
          metrics_text(core_.engine(), core_.admitted(), core_.metrics(), core_.opt().device) +
              connection_metrics(net_.counts()),
          "text/plain; version=0.0.4");
    });
    route("GET", "/v1/models", [this](const HttpRequest&, HttpResponse& res) {
      res.set_content(dump_json(openai_.models()), "application/json");
    });
    route("POST", "/generate", [this](const HttpRequest& q, HttpResponse& res) {
      tgi_.generate(q, res, "/generate", false, false);
    });
    route("POST", "/generate_stream", [this](const HttpRequest& q, HttpResponse& res) {
      tgi_.generate(q, res, "/generate_stream", true, false);
    });
    // LoRAX's and TGI's Python clients post here; "stream" in the body picks the answer.
    route("POST", "/", [this](const HttpRequest& q, HttpResponse& res) {
      tgi_.generate(q, res, "/", false, true);
    });
    route("POST", "/v1/completions",
          [this](const HttpRequest& q, HttpResponse& res) { openai_.completions(q, res); });
  }

  // The waiting room (transport.hpp): what a dashboard watches under a hostile client.
  static std::string connection_metrics(const TransportCounts& c) {
    std::string o;
    prom_family(o, "servekit:http_connections_waiting", "gauge",
                "Connections in the waiting room: open, their next request not yet whole.");
    prom_sample(o, "servekit:http_connections_waiting", static_cast<double>(c.waiting));
    prom_family(o, "servekit:http_connections_accepted_total", "counter", "Connections accepted.");
    prom_sample(o, "servekit:http_connections_accepted_total", static_cast<double>(c.accepted));
    prom_family(o, "servekit:http_connections_dropped_total", "counter",
                "Connections closed by the waiting room: timeout (no whole request in "
                "read_timeout_s), evicted (the oldest, when a bound was reached), refused (a "
                "request the transport could not read: 400, 413, 431).");
    prom_sample(o, "servekit:http_connections_dropped_total", static_cast<double>(c.timed_out),
                "reason=\"timeout\"");
    prom_sample(o, "servekit:http_connections_dropped_total", static_cast<double>(c.evicted),
                "reason=\"evicted\"");
    prom_sample(o, "servekit:http_connections_dropped_total", static_cast<double>(c.refused),
                "reason=\"refused\"");
    return o;
  }

  void route(std::string method, std::string path, Route r) {
    routes_[{std::move(method), std::move(path)}] = std::move(r);
  }

  // What the transport calls on a worker for each whole request.
  void handle(const HttpRequest& q, HttpResponse& res) {
    const auto it = routes_.find({q.method, q.path});
    if (it == routes_.end()) {
      res.status = 404;
      res.set_content(dump_json({{"error", "no route " + q.method + " " + q.path.substr(0, 80)},
                                 {"error_type", "validation"}}),
                      "application/json");
      return;
    }
    try {
      it->second(q, res);
    } catch (const std::exception& e) {
      res = HttpResponse{};
      send_error(res, ApiError(500, "generation", e.what()));
    }
  }

  // Declared in this order so the routes, which hold the core, are built after it and the
  // transport, whose threads run the routes, is destroyed before them.
  std::unique_ptr<EngineRef> own_;  // the template constructor's view of its engine
  ServerCore core_;
  TgiRoutes tgi_;
  OpenAiRoutes openai_;
  std::map<std::pair<std::string, std::string>, Route> routes_;  // (method, path)
  Transport net_;
  std::atomic<bool> stopped_{false};
};

}  // namespace servekit::serve::http
