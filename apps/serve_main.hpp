// SPDX-License-Identifier: Apache-2.0
#pragma once
// `servekit serve`, main()'s part: the HTTP server (serve/http/server.hpp) on the engine the
// composition built (serve.hpp), until SIGINT or SIGTERM (main() blocked both before any thread
// started). Compiled once, whatever the composition.
#include <pthread.h>
#include <sys/resource.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <string>
#include <thread>

#include "cli_common.hpp"
#include "job.hpp"
#include "servekit/serve/engine_ref.hpp"
#include "servekit/serve/http/server.hpp"
#include "servekit/text/tokenizer.hpp"

namespace servekit::cli {

inline int run_server(serve::EngineRef& engine, const std::string& device,
                      const text::Gpt2Tokenizer& tok, const ServeArgs& a) {
  serve::http::HttpOptions ho;
  ho.host = a.host;
  ho.port = a.port;
  ho.model_id = !a.model_id.empty() ? a.model_id
                : a.model.empty()   ? "gpt2-random"
                                    : fs::absolute(a.model).lexically_normal().filename().string();
  if (ho.model_id.empty()) ho.model_id = "gpt2";
  ho.max_pending = a.max_pending;
  ho.shutdown_grace_s = a.shutdown_grace_s;
  ho.read_timeout_s = a.read_timeout_s;
  ho.max_waiting_per_peer = static_cast<std::size_t>(a.max_waiting_per_client);
  ho.adapter_paths = !a.no_adapter_paths;
  ho.log_requests = !a.quiet;
  ho.version = SERVEKIT_VERSION;
  ho.limits.default_max_new_tokens = a.default_max_new_tokens;
  ho.device = device;
  // Each connection is a descriptor, idle ones included (the waiting room holds thousands):
  // the soft limit (often 1024) goes up to the hard one.
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  serve::http::HttpServer server(engine, tok, ho);
  const int port = server.bind();
  std::fprintf(stderr,
               "servekit serve: listening on http://%s:%d (model '%s', %s, on %s, max batch %d)\n",
               a.host.c_str(), port, ho.model_id.c_str(), engine.identity().engine.c_str(),
               ho.device.c_str(), a.max_batch);
  // SIGINT / SIGTERM are blocked in every thread (main() blocked them before any started)
  // and taken here, so the shutdown runs as ordinary code, not in a signal handler.
  std::atomic<bool> serving{true};
  std::thread signals([&] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    const timespec tick{0, 200 * 1000 * 1000};
    while (serving) {
      const int sig = sigtimedwait(&set, nullptr, &tick);
      if (sig == SIGINT || sig == SIGTERM) {
        std::fprintf(stderr, "servekit serve: %s: finishing %d requests, then stopping\n",
                     sig == SIGINT ? "SIGINT" : "SIGTERM", server.admitted());
        server.stop();
        return;
      }
    }
  });
  server.run();
  serving = false;
  signals.join();
  server.stop();
  const auto s = engine.stats();
  std::fprintf(stderr, "servekit serve: stopped after %ld requests, %ld generated tokens\n",
               s.finished, s.generated_tokens);
  return 0;
}

}  // namespace servekit::cli
