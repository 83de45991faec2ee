// SPDX-License-Identifier: Apache-2.0
#pragma once
// What main() hands to the compiled composition it picked (serve/compiled.hpp): one subcommand's
// arguments. Each composition is compiled in a translation unit of its own (entry.cpp.in), so
// main() sees only run_entry's declaration and the CLI's compositions compile in parallel.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "servekit/serve/composition.hpp"
#include "servekit/serve/ngram_proposer.hpp"
#include "servekit/text/tokenizer.hpp"

namespace servekit::serve {
class EngineRef;
}

namespace servekit::cli {

// The axes that are not part of the composition's type but of the run: merge (the adapter
// folded into the weights at load: a composition with lora none), the engine's LoRA limits.
struct RunChoice {
  serve::Spec spec;
  bool merge = false;
  int max_loras = 0;        // distinct adapters running at once (0: any)
  int max_lora_rank = 256;  // higher ranks are refused
};

// Whether stdout holds a partial line (generate's echoed prompt and its continuation): an
// error then starts a new line, so that it is not glued to the text.
inline bool g_stdout_mid_line = false;

struct GenerateArgs {
  std::string model, vocab, prompt, adapter, prompt_ids_text, seed_text, json_schema, regex;
  std::string grammar;  // a GBNF file
  std::vector<std::string> choices;
  std::vector<int32_t> prompt_ids;
  int max_new_tokens = 32, top_k = 0, top_logprobs = 0;
  bool greedy = false, no_cache = false, as_json = false, ignore_eos = false;
  float temperature = 1.f, top_p = 1.f;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  serve::Speculation speculative;  // --speculative; k = 0: off (then the engine runs it)
};

struct BatchArgs {
  std::string model, vocab, input, output;
  int max_batch = 8, max_batched_tokens = 512, prefix_cache_blocks = -1, kv_blocks = 0;
  bool no_prefix_caching = false, no_jump_forward = false;
  std::string scheduling_policy = "fcfs";  // or "priority"
  serve::Speculation speculative;          // --speculative; k = 0: off
  std::size_t memory_limit = 0;            // bytes; 0: a share of what is available
  std::size_t adapter_host_bytes = 0, adapter_device_bytes = 0;  // 0: EngineOptions' defaults
  uint64_t seed = 0;                                             // the random model's
  std::vector<std::string> adapters;  // PEFT folders; a line's "adapter" names one by folder name
};

struct ServeArgs {
  std::string model, vocab, host = "127.0.0.1", model_id;
  int port = 8080, max_batch = 16, max_batched_tokens = 512, kv_blocks = 0, max_pending = 128;
  int default_max_new_tokens = 100;
  double shutdown_grace_s = 10, read_timeout_s = 10;
  int max_waiting_per_client = 4096;  // connections one address may hold before a whole request
  uint64_t seed = 0;                  // the random model's, without --model
  std::vector<std::string> adapters;  // ID=DIR, an adapter folder, or a folder of adapters
  bool no_adapter_paths = false, quiet = false, no_prefix_caching = false;
  bool no_jump_forward = false;
  std::string scheduling_policy = "fcfs";  // or "priority"
  int prefix_cache_blocks = -1;
  serve::Speculation speculative;  // --speculative; k = 0: off
  std::size_t memory_limit = 0;    // bytes; 0: a share of what is available
  std::size_t adapter_host_bytes = 0, adapter_device_bytes = 0;  // 0: EngineOptions' defaults
};

// One composition's figures in `servekit bench` (apps/bench.hpp fills it).
struct BenchRow {
  double prefill_tok_s = 0, decode_tok_s = 0, ttft_p50_ms = 0, ttft_p99_ms = 0, tpot_p50_ms = 0,
         tpot_p99_ms = 0;
  double weight_mib = 0, kv_mib = 0;
};

struct BenchArgs {
  std::string model, vocab, compare, out = "servekit_bench";
  std::vector<int> batches = {1, 8};
  int prompt = 128, new_tokens = 128, rounds = 3, adapters = 0;
  uint64_t seed = 0;
  // > 0: an arrivals workload instead of one batch at once: `requests` requests of mixed lengths
  // arrive at `rate` per second (Poisson), and each batch size is the engine's max batch.
  double rate = 0;
  int requests = 32;
};

// A bench's state for one composition: its model stays loaded between rounds, so that the
// compositions' rounds interleave (apps/bench.hpp).
struct BenchSession {
  virtual ~BenchSession() = default;
  virtual BenchRow measure(int batch) = 0;
};

// serve: the engine a composition built for the server, and where its kernels run.
struct Served {
  std::unique_ptr<serve::EngineRef> engine;
  std::string device;
};

struct Job {
  RunChoice choice;
  const text::Gpt2Tokenizer* tok = nullptr;
  const GenerateArgs* generate = nullptr;
  const BatchArgs* batch = nullptr;
  const ServeArgs* serve = nullptr;
  const BenchArgs* bench = nullptr;
  std::unique_ptr<BenchSession>* bench_out = nullptr;  // bench: where the session goes
  Served* serve_out = nullptr;                         // serve: where the engine goes
};

// Runs job with the I-th compiled composition; defined in the composition's own translation unit.
template <std::size_t I>
int run_entry(const Job& job);

}  // namespace servekit::cli
