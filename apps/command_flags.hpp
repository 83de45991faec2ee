// SPDX-License-Identifier: Apache-2.0
#pragma once
// The flag groups several subcommands share: the model and its tokenizer, the host threads,
// the composition, prefix caching and the engine's memory.
#include <CLI/CLI.hpp>
#include <cstddef>
#include <string>

#include "composition_flags.hpp"

namespace servekit::cli {

inline constexpr const char* kVocabHelp =
    "tokenizer folder (default: the model folder's own, else $SERVEKIT_VOCAB, else the GPT-2 "
    "vocabulary installed with servekit; --version shows which)";

// --threads (core/thread_pool.hpp), the composition flags, --model and --vocab: what generate,
// batch, serve and bench all start with.
inline void add_model_flags(CLI::App* sub, int& threads, CompositionFlags& flags, bool engine,
                            std::string& model, std::string& vocab) {
  sub->add_option("--threads", threads,
                  "threads of the host kernels (default: $SERVEKIT_THREADS, else "
                  "$OMP_NUM_THREADS, else every CPU this process may use)")
      ->check(CLI::Range(1, 1024));
  add_composition_flags(sub, flags, engine);
  sub->add_option("--model", model,
                  "HF GPT-2 folder (config.json + model.safetensors); default: random GPT-2 124M");
  sub->add_option("--vocab", vocab, kVocabHelp);
}

// Prefix caching (paged caches, continuous and sequential schedulers), for batch and serve.
inline void add_prefix_flags(CLI::App* sub, bool& off, int& blocks) {
  sub->add_flag("--no-prefix-caching,--no-enable-prefix-caching", off,
                "compute every prompt whole (default: a prompt maps the cached KV blocks of "
                "its longest known prefix)");
  sub->add_option("--prefix-cache-blocks", blocks,
                  "cached KV blocks nobody holds kept at most (default: as many as the pool "
                  "has free)")
      ->check(CLI::NonNegativeNumber);
}

// Jump-forward (constrain/forced_tokens.hpp), for batch and serve.
inline void add_jump_flag(CLI::App* sub, bool& off) {
  sub->add_flag("--no-jump-forward", off,
                "write the tokens a JSON schema or regex forces a step each (default: appended at "
                "once and fed in one step; the same tokens either way)");
}

// vLLM's --scheduling-policy: fcfs, or priority (requests' "priority" orders the queues, lower
// first, and an urgent one may preempt a running one of a higher number).
inline void add_policy_flag(CLI::App* sub, std::string& policy) {
  sub->add_option("--scheduling-policy", policy,
                  "fcfs (first come, first served; a request's priority must be 0) or priority "
                  "(lower priority numbers run first, preempting higher ones when there is no "
                  "room; the same tokens either way)")
      ->check(CLI::IsMember({"fcfs", "priority"}));
}

// The engine's memory (serve/memory_plan.hpp), for batch and serve.
inline void add_memory_flags(CLI::App* sub, int& blocks, std::size_t& limit,
                             std::size_t& adapter_host, std::size_t& adapter_device) {
  sub->add_option("--kv-blocks", blocks,
                  "KV-cache blocks of a paged cache (0: as many as fit in --memory-limit, up "
                  "to max-batch full-length sequences)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--memory-limit,--kv-cache-memory", limit,
                  "bytes the KV cache, step buffers and adapter tiers may take, e.g. 8GiB or "
                  "500MB (default: 90% of the memory available at start; the GPU's on cuda)")
      ->transform(CLI::AsSizeValue(true));
  sub->add_option("--adapter-host-memory", adapter_host,
                  "bytes of loaded LoRA adapters kept in memory, e.g. 512MiB (0: 2 GiB); counted "
                  "against --memory-limit")
      ->transform(CLI::AsSizeValue(true));
  sub->add_option("--adapter-device-memory", adapter_device,
                  "bytes of the model's adapter slots, the adapters a step can run (0: 1 GiB; "
                  "GPU memory on cuda); counted against --memory-limit")
      ->transform(CLI::AsSizeValue(true));
}

}  // namespace servekit::cli
