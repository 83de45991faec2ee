// SPDX-License-Identifier: Apache-2.0
// `servekit serve`: dims from the checkpoint's config.json, then one engine type per shape:
// F32 weights, a paged KV cache, gathered LoRA (every row may carry its own adapter).
#include "serve.hpp"

#include <pthread.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <thread>

#include "servekit/model/dispatch.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/engine.hpp"
#include "servekit/serve/http/server.hpp"
#include "servekit/text/tokenizer.hpp"
#include "cli_common.hpp"

namespace fs = std::filesystem;

namespace servekit::cli {
namespace {

// --adapter values: ID=DIR, a folder with adapter_config.json (its name is the id), or a
// folder of such folders at any depth (each named by its path below it: predibase/cnn).
std::vector<std::pair<std::string, fs::path>> adapter_list(const std::vector<std::string>& args) {
  std::vector<std::pair<std::string, fs::path>> out;
  for (const auto& a : args) {
    if (auto eq = a.find('='); eq != std::string::npos) {
      out.emplace_back(a.substr(0, eq), a.substr(eq + 1));
      continue;
    }
    const fs::path dir(a);
    if (!fs::is_directory(dir)) fail("serve: --adapter ", a, ": not a folder");
    if (fs::exists(dir / "adapter_config.json")) {
      out.emplace_back(fs::absolute(dir).lexically_normal().filename().string(), dir);
      continue;
    }
    const std::size_t before = out.size();
    for (const auto& e : fs::recursive_directory_iterator(dir))
      if (e.is_directory() && fs::exists(e.path() / "adapter_config.json"))
        out.emplace_back(fs::relative(e.path(), dir).generic_string(), e.path());
    if (out.size() == before)
      fail("serve: --adapter ", a, ": no adapter_config.json in it or in any folder below it");
  }
  return out;
}

template <class D>
int serve_dims(const ServeArgs& a, const text::Gpt2Tokenizer& tok) {
  using Model = Gpt2<Config<D, weights::F32, kv::Paged<16>, lora::Gathered>>;
  Model model(a.model.empty() ? model::random_gpt2<D>(a.seed) : model::load_gpt2<D>(a.model));
  serve::EngineOptions eo{.max_batch = a.max_batch,
                          .max_batched_tokens = a.max_batched_tokens,
                          .kv_blocks = a.kv_blocks};
  eo.adapter_paths = !a.no_adapter_paths;
  serve::Engine<Model, serve::sched::Continuous> engine(model, tok, eo);
  for (const auto& [id, dir] : adapter_list(a.adapters)) {
    engine.adapters().add(id, dir);
    std::fprintf(stderr, "servekit serve: adapter '%s' from %s\n", id.c_str(), dir.c_str());
  }
  serve::http::HttpOptions ho;
  ho.host = a.host;
  ho.port = a.port;
  ho.model_id = !a.model_id.empty() ? a.model_id
                : a.model.empty()   ? "gpt2-random"
                                    : fs::absolute(a.model).lexically_normal().filename().string();
  if (ho.model_id.empty()) ho.model_id = "gpt2";
  ho.max_pending = a.max_pending;
  ho.shutdown_grace_s = a.shutdown_grace_s;
  ho.adapter_paths = !a.no_adapter_paths;
  ho.log_requests = !a.quiet;
  ho.version = SERVEKIT_VERSION;
  ho.limits.default_max_new_tokens = a.default_max_new_tokens;
  serve::http::HttpServer server(engine, tok, ho);
  const int port = server.bind();
  std::fprintf(stderr, "servekit serve: listening on http://%s:%d (model '%s', %s, max batch %d)\n",
               a.host.c_str(), port, ho.model_id.c_str(), decltype(engine)::name().c_str(),
               a.max_batch);
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

}  // namespace

int run_serve(const ServeArgs& a) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before the engine's and server's threads exist
  std::signal(SIGPIPE, SIG_IGN);              // a client gone mid-write is an error return
  auto tok = text::Gpt2Tokenizer::from_dir(text::vocab_dir_for(a.vocab, a.model));
  if (a.model.empty()) {
    std::fprintf(stderr,
                 "servekit serve: no --model given: serving a seeded random GPT-2 124M; its text "
                 "is meaningless.\n");
    return serve_dims<dims::Gpt2Small>(a, tok);
  }
  auto cfg = model::read_gpt2_config(fs::path(a.model) / "config.json");
  return dispatch_dims(cfg, [&]<class D>(std::type_identity<D>) { return serve_dims<D>(a, tok); });
}

}  // namespace servekit::cli
