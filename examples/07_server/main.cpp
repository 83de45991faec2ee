// SPDX-License-Identifier: Apache-2.0
// Lesson 7: a LoRAX-style server.
//
// `servekit serve` is one composition of policies behind HTTP; this program is the same server
// over a composition of your own, to show that serve::http::HttpServer takes any engine:
// here segmented LoRA (SGMV) and a paged cache of 32-token blocks on the tiny fixture model,
// where `servekit serve` uses gathered LoRA and 16-token blocks. The course's client code then
// talks to it unchanged apart from the URL (examples/07_server/client.py; run.sh does both).
//
//   07_server --model tests/fixtures/tiny-a --vocab tests/fixtures/tiny-vocab
//             --adapter predibase/cnn=tests/fixtures/tiny-a/lora/r8 --port 8080
// Stops on Ctrl-C (SIGINT) or SIGTERM, after the requests it holds have finished.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "servekit/model/gpt2.hpp"
#include "servekit/serve/engine.hpp"
#include "servekit/serve/http/server.hpp"
#include "servekit/text/tokenizer.hpp"

namespace sk = servekit;

// The composition: every policy is a type, checked by its concept.
using Model = sk::Gpt2<sk::Config<sk::dims::TinyA, sk::weights::F32, sk::kv::Paged<32>,
                                  sk::lora::Segmented, sk::backend::Host>>;
using Engine = sk::serve::Engine<Model, sk::serve::sched::Continuous>;

int main(int argc, char** argv) {
  CLI::App app{"lesson 7: a LoRAX-style server over your own policy composition"};
  std::string model_dir, vocab;
  std::vector<std::string> adapters;
  int port = 8080;
  app.add_option("--model", model_dir, "HF folder of a tiny-a-shaped GPT-2")->required();
  app.add_option("--vocab", vocab, "tokenizer folder")->required();
  app.add_option("--adapter", adapters, "ID=DIR, repeatable");
  app.add_option("--port", port, "port (0: any free one)");
  CLI11_PARSE(app, argc, argv);
  // Signals are taken by one thread with sigwait, so stopping is ordinary code.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  try {
    auto tok = sk::text::Gpt2Tokenizer::from_dir(vocab);
    Model model = Model::load(model_dir);
    Engine engine(model, tok, {.max_batch = 16});
    for (const auto& a : adapters) {
      const auto eq = a.find('=');
      if (eq == std::string::npos) sk::fail("--adapter ", a, ": expected ID=DIR");
      engine.adapters().add(a.substr(0, eq), a.substr(eq + 1));
    }
    sk::serve::http::HttpServer server(engine, tok, {.port = port, .model_id = "tiny-a"});
    std::fprintf(stderr, "07_server: listening on http://127.0.0.1:%d (%s)\n", server.bind(),
                 Engine::name().c_str());
    std::thread stopper([&] {
      int sig = 0;
      sigwait(&set, &sig);
      server.stop();
    });
    server.run();
    stopper.join();
    std::fprintf(stderr, "07_server: stopped\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "07_server: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
