// SPDX-License-Identifier: Apache-2.0
#pragma once
// ServerCore: what every route of the HTTP server shares. It holds the engine, the
// tokenizer and the options, admits requests (at most max_pending at once, none while
// draining), and carries each admitted request through its life: submit it with hooks that
// feed its Flow, wait for it or abandon it, and count it when it ends.
//
// HttpServer (server.hpp) owns one and hands it to the route families (tgi_routes.hpp,
// openai_routes.hpp); it lives in its own header so those can use it without including the
// server that includes them.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "servekit/serve/engine_ref.hpp"
#include "servekit/serve/http/api_error.hpp"
#include "servekit/serve/http/json_fields.hpp"
#include "servekit/serve/http/message.hpp"
#include "servekit/serve/http/metrics.hpp"
#include "servekit/serve/http/openai.hpp"
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
  double read_timeout_s = 10;    // a request must be whole this long after its connection
  std::size_t max_waiting_per_peer = 4096;  // connections of one address before a whole request
  bool adapter_paths = true;                // adapter_source "local": a request may name a folder
  bool log_requests = true;                 // one line per request on stderr
  std::string version = "0";
  std::string device = "cpu";  // where the kernels run, in words (the CPU or GPU's name)
  ApiLimits limits;
};

// What a connection waits on: the Flows it guards. The choices of one OpenAI request (n > 1)
// share one, so that their stream wakes on a token of any of them.
struct Bell {
  std::mutex mu;
  std::condition_variable cv;
};

// What one request's connection waits on; the engine thread fills it, under its bell's lock.
struct Flow {
  std::shared_ptr<Bell> bell = std::make_shared<Bell>();
  std::vector<std::string> pieces;  // one per generated token (may be empty: held back)
  std::vector<GeneratedToken> tokens;
  bool ended = false;
  std::atomic<bool> abandoned{false};  // the client went away: cancel at the next token
};

// A refusal as its API spells it: TGI's {"error", "error_type"}, or OpenAI's error object,
// where a 422 is a 400 as OpenAI's clients expect.
inline void send_error(HttpResponse& res, const ApiError& e, bool openai = false) {
  res.status = openai && e.status == 422 ? 400 : e.status;
  json body = openai ? openai_error(ApiError(res.status, e.type, e.what()))
                     : json{{"error", e.what()}, {"error_type", e.type}};
  res.set_content(dump_json(body), "application/json");
}

class ServerCore {
 public:
  // An admitted request's place; given back when its response is done, whatever happened.
  struct Ticket {
    ServerCore* s;
    explicit Ticket(ServerCore* core) : s(core) {}
    ~Ticket() {
      {
        std::lock_guard lk(s->mu_);
        s->admitted_--;
      }
      s->idle_cv_.notify_all();
    }
  };

  // What a route submits: the request, and how its answer is to be written.
  struct Job {
    std::shared_ptr<Flow> flow = std::make_shared<Flow>();
    std::shared_ptr<Ticket> ticket;
    RequestHandle handle;
    std::string route, adapter, prompt_text;
  };

  ServerCore(EngineRef& engine, const text::Gpt2Tokenizer& tok, HttpOptions opt)
      : engine_(engine), tok_(tok), opt_(std::move(opt)), seeds_(std::random_device{}()) {
    if (opt_.max_pending < 1) fail("http: max_pending must be >= 1, got ", opt_.max_pending);
  }
  ServerCore(const ServerCore&) = delete;
  ServerCore& operator=(const ServerCore&) = delete;

  EngineRef& engine() const { return engine_; }
  const text::Gpt2Tokenizer& tok() const { return tok_; }
  const HttpOptions& opt() const { return opt_; }
  const ServerMetrics& metrics() const { return metrics_; }

  // ---- admission -----------------------------------------------------------------------

  std::shared_ptr<Ticket> admit() {
    if (draining_) throw ApiError(503, "unavailable", "the server is shutting down");
    std::lock_guard lk(mu_);
    if (admitted_ >= opt_.max_pending) {
      metrics_.reject("overloaded");
      throw ApiError(429, "overloaded",
                     detail::cat("the server has ", admitted_,
                                 " requests (max_pending = ", opt_.max_pending, "); retry later"));
    }
    admitted_++;
    return std::make_shared<Ticket>(this);
  }

  // Requests admitted and not yet answered.
  int admitted() const {
    std::lock_guard lk(mu_);
    return admitted_;
  }

  bool draining() const { return draining_; }

  // Refuses new requests from now on, lets the admitted ones run for up to shutdown_grace_s,
  // then cancels what is left and waits for the engine to retire it.
  void drain() {
    draining_ = true;
    std::unique_lock lk(mu_);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(opt_.shutdown_grace_s);
    idle_cv_.wait_until(lk, deadline, [&] { return admitted_ == 0; });
    for (uint64_t id : live_) engine_.cancel(id);
    idle_cv_.wait_for(lk, std::chrono::seconds(30), [&] { return admitted_ == 0; });
  }

  // ---- a request's life ----------------------------------------------------------------

  // A request refused before it ran, counted by its error type.
  void reject(const std::string& type) { metrics_.reject(type); }

  // Submits r with the hooks that feed job's flow; servekit::Error (the engine's checks) is a
  // 422 that quotes it.
  void submit(Request r, Job& job) {
    auto flow = job.flow;
    r.on_piece = [flow](std::string_view piece, const GeneratedToken& t) {
      {
        std::lock_guard lk(flow->bell->mu);
        flow->pieces.emplace_back(piece);
        flow->tokens.push_back(t);
      }
      flow->bell->cv.notify_all();
      return !flow->abandoned.load();
    };
    r.on_end = [flow] {
      {
        std::lock_guard lk(flow->bell->mu);
        flow->ended = true;
      }
      flow->bell->cv.notify_all();
    };
    try {
      job.handle = engine_.submit(std::move(r));
    } catch (const Error& e) {
      reject("validation");
      throw ApiError(422, "validation", e.what());
    }
    std::lock_guard lk(mu_);
    live_.insert(job.handle.id);
  }

  // Blocks until the request has its first token (its prompt is in the cache) or has ended.
  void wait_first_token(Job& job) {
    std::unique_lock lk(job.flow->bell->mu);
    job.flow->bell->cv.wait(lk, [&] { return job.flow->ended || !job.flow->tokens.empty(); });
  }

  // Blocks until the request has ended; its result.
  const Result& wait(Job& job) {
    {
      std::unique_lock lk(job.flow->bell->mu);
      job.flow->bell->cv.wait(lk, [&] { return job.flow->ended; });
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
    }
    metrics_.record(r, adapter, gone);
    if (opt_.log_requests)
      std::fprintf(stderr,
                   "servekit serve: %s id=%llu adapter=%s prompt=%d generated=%zu ttft=%.1fms "
                   "tpot=%.2fms e2e=%.1fms finish=%s%s\n",
                   job.route.c_str(), static_cast<unsigned long long>(job.handle.id),
                   adapter.empty() ? "-" : adapter.c_str(), r.metrics.prompt_tokens,
                   r.tokens.size(), r.metrics.ttft_ms, r.metrics.tpot_ms, r.metrics.e2e_ms,
                   r.finish_reason.c_str(), gone ? " (client went away)" : "");
  }

  // A result that is an error (a bad adapter, a throwing step) as the API's error.
  static void throw_if_failed(const Result& r) {
    if (r.finish_reason == finish::error) throw ApiError(424, "generation", r.error);
    if (r.finish_reason == finish::cancelled && r.tokens.empty())
      throw ApiError(503, "unavailable", "the request was cancelled: the server is shutting down");
  }

  // ---- shared by the routes ------------------------------------------------------------

  uint64_t draw_seed() {
    std::lock_guard lk(mu_);
    return seeds_();
  }

  std::string token_text(int32_t id) const { return tok_.token_bytes(id); }

  std::vector<std::string> adapter_ids() const { return engine_.adapter_ids(); }

 private:
  EngineRef& engine_;
  const text::Gpt2Tokenizer& tok_;
  HttpOptions opt_;
  ServerMetrics metrics_;
  std::atomic<bool> draining_{false};

  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  int admitted_ = 0;
  std::set<uint64_t> live_;  // submitted, not yet finished
  std::mt19937_64 seeds_;
};

}  // namespace servekit::serve::http
