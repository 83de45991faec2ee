// SPDX-License-Identifier: Apache-2.0
#pragma once
// `servekit serve`: the HTTP server (serve/http/server.hpp) on a continuous-batching engine
// with LoRA adapters, until SIGINT or SIGTERM.
#include <cstdint>
#include <string>
#include <vector>

namespace servekit::cli {

struct ServeArgs {
  std::string model, vocab, host = "127.0.0.1", model_id;
  int port = 8080, max_batch = 16, max_batched_tokens = 512, kv_blocks = 0, max_pending = 128;
  int default_max_new_tokens = 100;
  double shutdown_grace_s = 10;
  uint64_t seed = 0;                  // the random model's, without --model
  std::vector<std::string> adapters;  // ID=DIR, an adapter folder, or a folder of adapters
  bool no_adapter_paths = false, quiet = false;
};

// Serves until a signal; 0 after a clean shutdown.
int run_serve(const ServeArgs& a);

}  // namespace servekit::cli
