// SPDX-License-Identifier: Apache-2.0
// servekit: the command line. `tokenize` turns JSON lines of text into ids; `generate` runs a
// GPT-2 checkpoint (HF layout) or, without one, a seeded random GPT-2 124M; `batch` runs a file
// of requests through the serving engine; `serve` answers HTTP (LoRAX / TGI and OpenAI APIs).
#include <pthread.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "bench_table.hpp"
#include "cli_common.hpp"
#include "composition_flags.hpp"
#include "job.hpp"
#if !defined(SERVEKIT_CLI_NO_SERVE)
#include "serve_main.hpp"
#endif
#include "servekit/core/thread_pool.hpp"
#include "servekit/serve/compiled.hpp"
#include "servekit/text/tokenizer.hpp"

namespace fs = std::filesystem;
namespace sk = servekit;
using json = nlohmann::json;

namespace {

using sk::cli::dump;
using sk::text::vocab_dir_for;

int run_tokenize(const std::string& vocab) {
  auto tok = sk::text::Gpt2Tokenizer::from_dir(vocab_dir_for(vocab, ""));
  std::string line;
  int lineno = 0, bad = 0;
  while (std::getline(std::cin, line)) {
    lineno++;
    if (line.empty()) continue;
    json out;
    try {
      json in = json::parse(line);
      if (!in.is_object() || !in.contains("text") || !in["text"].is_string())
        sk::fail("stdin line ", lineno, ": expected {\"text\": \"...\"}");
      out["ids"] = tok.encode(in["text"].get<std::string>());
    } catch (const json::exception& e) {
      out = {{"error", sk::detail::cat("stdin line ", lineno, ": not valid JSON: ", e.what())}};
      bad++;
    } catch (const sk::Error& e) {
      out = {{"error", e.what()}};
      bad++;
    }
    std::cout << dump(out) << '\n';
  }
  return bad ? 1 : 0;
}

// Runs job with the compiled composition its choice names (each in its own translation unit).
int run_compiled(const sk::cli::Job& job) {
  const auto i = sk::serve::compiled_index(job.choice.spec);
  if (!i) sk::serve::fail_not_compiled(job.choice.spec);
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    static constexpr int (*table[])(const sk::cli::Job&) = {&sk::cli::run_entry<I>...};
    return table[*i](job);
  }
  (std::make_index_sequence<sk::serve::kCompiledCount>{});
}

// The bench's sessions, one per composition compared, made through run_compiled.
std::unique_ptr<sk::cli::BenchSession> bench_session(const sk::cli::Job& base,
                                                     const sk::cli::RunChoice& c) {
  std::unique_ptr<sk::cli::BenchSession> s;
  sk::cli::Job job = base;
  job.choice = c;
  job.bench_out = &s;
  run_compiled(job);
  return s;
}

}  // namespace

constexpr const char* kVocabHelp =
    "tokenizer folder (default: the model folder's own, else $SERVEKIT_VOCAB, else the GPT-2 "
    "vocabulary installed with servekit; --version shows which)";

int main(int argc, char** argv) {
  CLI::App app{"servekit: GPT-2 serving techniques, one policy at a time"};
  app.require_subcommand(1);
  // The vocabulary in use is part of what an install is: shown beside the version.
  app.set_version_flag("--version", [] {
    std::string v = std::string("servekit ") + SERVEKIT_VERSION + "\nvocabulary: ";
    try {
      v += sk::text::default_vocab_dir().string();
    } catch (const std::exception& e) {
      v += e.what();
    }
    v += "\ncompositions (weights/kv/lora/scheduler/backend), " +
         std::to_string(sk::serve::kCompiledCount) + " compiled:\n" + sk::serve::compiled_list();
    v.pop_back();
    return v;
  });

  std::string tok_vocab;
  auto* tokenize =
      app.add_subcommand("tokenize", "JSON lines {\"text\": ...} on stdin -> {\"ids\": [...]}");
  tokenize->add_option("--vocab", tok_vocab,
                       "folder with encoder.json+vocab.bpe or vocab.json+merges.txt (default: "
                       "$SERVEKIT_VOCAB, else the GPT-2 vocabulary installed with servekit)");

  // The host kernels' threads (core/thread_pool.hpp), for generate, batch and serve.
  int threads = 0;
  const auto add_threads = [&](CLI::App* sub) {
    sub->add_option("--threads", threads,
                    "threads of the host kernels (default: $SERVEKIT_THREADS, else "
                    "$OMP_NUM_THREADS, else every CPU this process may use)")
        ->check(CLI::Range(1, 1024));
  };

  // Prefix caching (paged caches, continuous and sequential schedulers), for batch and serve.
  const auto add_prefix_flags = [](CLI::App* sub, bool& off, int& blocks) {
    sub->add_flag("--no-prefix-caching,--no-enable-prefix-caching", off,
                  "compute every prompt whole (default: a prompt maps the cached KV blocks of "
                  "its longest known prefix)");
    sub->add_option("--prefix-cache-blocks", blocks,
                    "cached KV blocks nobody holds kept at most (default: as many as the pool "
                    "has free)")
        ->check(CLI::NonNegativeNumber);
  };

  // The engine's memory (serve/memory_plan.hpp), for batch and serve.
  const auto add_memory_flags = [](CLI::App* sub, int& blocks, std::size_t& limit,
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
  };

  sk::cli::GenerateArgs g;
  sk::cli::CompositionFlags gen_flags;
  bool merge = false;
  auto* gen = app.add_subcommand("generate", "generate a continuation of a prompt");
  add_threads(gen);
  add_composition_flags(gen, gen_flags, false);
  gen->add_option("--model", g.model,
                  "HF GPT-2 folder (config.json + model.safetensors); default: random GPT-2 124M");
  gen->add_option("--vocab", g.vocab, kVocabHelp);
  auto* ptext = gen->add_option("--prompt", g.prompt, "prompt text");
  std::string positional;
  auto* ppos = gen->add_option("text", positional, "prompt text (the same as --prompt)");
  ppos->excludes(ptext);
  auto* pids =
      gen->add_option("--prompt-ids", g.prompt_ids_text, "prompt as token ids (comma-separated)");
  ptext->excludes(pids);
  ppos->excludes(pids);
  gen->add_option("-n,--max-new-tokens", g.max_new_tokens, "tokens to generate")
      ->check(CLI::NonNegativeNumber);
  auto* greedy = gen->add_flag("--greedy", g.greedy, "greedy decoding (argmax)");
  auto* temp =
      gen->add_option("--temperature", g.temperature, "sampling temperature (0: greedy, as in HF)");
  auto* topk = gen->add_option("--top-k", g.top_k, "keep the k most likely tokens (0: off)");
  auto* topp = gen->add_option("--top-p", g.top_p, "nucleus sampling mass (1: off)");
  greedy->excludes(temp)->excludes(topk)->excludes(topp);
  gen->add_option("--seed", g.seed_text,
                  "seed for sampling and for the random model (0 to 2^64-1)");
  gen->add_option("--stop", g.stop, "stop string (repeatable)");
  gen->add_option("--adapter", g.adapter,
                  "PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors)");
  gen->add_flag("--merge", merge,
                "merge the adapter into the weights at load (--lora merge; default: apply it at "
                "run time, --lora gathered)")
      ->needs(gen->get_option("--adapter"));
  gen->add_flag("--ignore-eos", g.ignore_eos, "keep generating after <|endoftext|>");
  gen->add_option("--json-schema", g.json_schema,
                  "a JSON schema file: the output is JSON that fits it (structured generation)");
  gen->add_flag("--no-cache", g.no_cache, "recompute the whole sequence every step (no KV cache)");
  gen->add_flag("--json", g.as_json, "print one JSON object: ids, text, timings");
  gen->add_option("--top-logprobs", g.top_logprobs,
                  "log-probabilities of the K best alternatives per token (a JSON field with "
                  "--json, else a table after the text)")
      ->check(CLI::NonNegativeNumber);

  sk::cli::BatchArgs b;
  sk::cli::CompositionFlags batch_flags;
  auto* batch =
      app.add_subcommand("batch", "run a file of requests (JSON lines) through the serving engine");
  add_threads(batch);
  add_composition_flags(batch, batch_flags, true);
  batch->add_option(
      "--model", b.model,
      "HF GPT-2 folder (config.json + model.safetensors); default: random GPT-2 124M");
  batch->add_option("--vocab", b.vocab, kVocabHelp);
  batch
      ->add_option("--input", b.input,
                   "JSON lines: {\"prompt\": ..., \"max_new_tokens\": ..., \"temperature\": ...}")
      ->required();
  batch->add_option("--output", b.output, "result JSON lines (default: stdout)");
  batch->add_option("--max-batch", b.max_batch, "sequences running at once")
      ->check(CLI::Range(1, 4096));
  batch
      ->add_option("--max-batched-tokens", b.max_batched_tokens,
                   "new tokens per step (continuous; longer prompts are chunked)")
      ->check(CLI::Range(1, 1 << 20));
  batch->add_option("--adapter", b.adapters,
                    "PEFT LoRA adapter folder (repeatable); a line's \"adapter\" names one by its "
                    "folder name");
  add_prefix_flags(batch, b.no_prefix_caching, b.prefix_cache_blocks);
  add_memory_flags(batch, b.kv_blocks, b.memory_limit, b.adapter_host_bytes,
                   b.adapter_device_bytes);
  std::string batch_seed;
  batch->add_option("--seed", batch_seed, "seed of the random model (without --model)");

  sk::cli::ServeArgs sv;
  sk::cli::CompositionFlags serve_flags;
  auto* srv = app.add_subcommand(
      "serve", "HTTP server: LoRAX / text-generation-inference and OpenAI completions APIs");
  add_threads(srv);
  add_composition_flags(srv, serve_flags, true);
  srv->add_option("--model", sv.model,
                  "HF GPT-2 folder (config.json + model.safetensors); default: random GPT-2 124M");
  srv->add_option("--vocab", sv.vocab, kVocabHelp);
  srv->add_option("--adapter,--adapters", sv.adapters,
                  "LoRA adapters: ID=DIR, an adapter folder (id: its name), or a folder of them "
                  "(ids: their paths below it, e.g. predibase/cnn); repeatable");
  srv->add_option("--host", sv.host, "address to listen on (default: loopback only)");
  srv->add_option("--port", sv.port, "port (0: any free one, printed at start)")
      ->check(CLI::Range(0, 65535));
  srv->add_option("--model-id", sv.model_id,
                  "the base model's name in /info and OpenAI's `model` (default: folder name)");
  srv->add_option("--max-batch", sv.max_batch, "sequences running at once")
      ->check(CLI::Range(1, 4096));
  srv->add_option("--max-batched-tokens", sv.max_batched_tokens,
                  "new tokens per step (longer prompts are chunked)")
      ->check(CLI::Range(1, 1 << 20));
  add_memory_flags(srv, sv.kv_blocks, sv.memory_limit, sv.adapter_host_bytes,
                   sv.adapter_device_bytes);
  add_prefix_flags(srv, sv.no_prefix_caching, sv.prefix_cache_blocks);
  srv->add_option("--max-pending", sv.max_pending,
                  "requests admitted at once (waiting + running); more get 429")
      ->check(CLI::Range(1, 1 << 16));
  srv->add_option("--default-max-new-tokens", sv.default_max_new_tokens,
                  "max_new_tokens when a request gives none")
      ->check(CLI::Range(1, 1 << 20));
  srv->add_option("--shutdown-grace", sv.shutdown_grace_s,
                  "seconds admitted requests may run after SIGINT/SIGTERM before they are "
                  "cancelled")
      ->check(CLI::NonNegativeNumber);
  srv->add_flag("--no-adapter-paths", sv.no_adapter_paths,
                "refuse adapter_source \"local\" (requests naming a folder on this machine)");
  srv->add_flag("-q,--quiet", sv.quiet, "no log line per request");
  std::string serve_seed;
  srv->add_option("--seed", serve_seed, "seed of the random model (without --model)");

  sk::cli::BenchArgs be;
  sk::cli::CompositionFlags bench_flags;
  std::string bench_seed;
  auto* bench = app.add_subcommand(
      "bench", "compare compositions: prefill and decode tokens/s, TTFT and TPOT, memory");
  add_threads(bench);
  add_composition_flags(bench, bench_flags, true);
  bench->add_option(
      "--model", be.model,
      "HF GPT-2 folder (config.json + model.safetensors); default: random GPT-2 124M");
  bench->add_option("--vocab", be.vocab, kVocabHelp);
  bench->add_option("--compare", be.compare,
                    "AXIS=V1,V2,...: the compositions compared, the other axes from the flags "
                    "(e.g. weights=f32,f16,bf16,u8; kv=contiguous,paged16-f16; lora=loop,gathered; "
                    "scheduler=...; backend=host,emulated)");
  bench->add_option("--batch", be.batches, "batch sizes (comma-separated)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024));
  bench->add_option("--prompt", be.prompt, "prompt tokens per request")
      ->check(CLI::Range(1, 1 << 16));
  bench->add_option("--new", be.new_tokens, "generated tokens per request")
      ->check(CLI::Range(2, 1 << 16));
  bench->add_option("--rounds", be.rounds, "rounds (each runs every composition once)")
      ->check(CLI::Range(1, 1000));
  bench->add_option("--adapters", be.adapters, "random LoRA adapters, one per request in turn")
      ->check(CLI::Range(0, 1024));
  bench->add_option("--out", be.out, "CSV and PNG path without extension");
  bench->add_option("--seed", bench_seed, "seed of the random model and prompts");

  // Unknown flags are collected, not rejected by CLI11, so that the error can suggest the
  // nearest known one.
  for (auto* sub : {tokenize, gen, batch, srv, bench}) sub->allow_extras();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto* sub : {tokenize, gen, batch, srv, bench})
    if (*sub && !sub->remaining().empty()) {
      std::fprintf(stderr, "servekit %s: error: %s\n", sub->get_name().c_str(),
                   sk::cli::unknown_args_message(*sub).c_str());
      return 2;
    }
  if (!positional.empty()) g.prompt = positional;
  try {
    if (threads > 0) sk::set_host_threads(threads);
    if (*tokenize) return run_tokenize(tok_vocab);
    sk::cli::Job job;
    if (*srv) {
      if (!serve_seed.empty()) sv.seed = sk::cli::parse_number<uint64_t>("--seed", serve_seed);
      job.choice = sk::cli::resolve(serve_flags, {.kv = "paged16", .lora = "gathered"});
      // SIGINT / SIGTERM blocked before the engine's and the server's threads exist (the server
      // takes them on a thread of its own); a client gone mid-write is an error return.
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGINT);
      sigaddset(&set, SIGTERM);
      pthread_sigmask(SIG_BLOCK, &set, nullptr);
      std::signal(SIGPIPE, SIG_IGN);
      const auto tok = sk::text::Gpt2Tokenizer::from_dir(vocab_dir_for(sv.vocab, sv.model));
      if (sv.model.empty())
        std::fprintf(stderr,
                     "servekit serve: no --model given: serving a seeded random GPT-2 124M; its "
                     "text is meaningless.\n");
      job.tok = &tok;
      job.serve = &sv;
#if defined(SERVEKIT_CLI_NO_SERVE)  // the sanitizer build (apps/run_composition.hpp)
      sk::fail("this sanitizer build has no `serve` subcommand");
#else
      sk::cli::Served served;
      job.serve_out = &served;
      run_compiled(job);
      return sk::cli::run_server(*served.engine, served.device, tok, sv);
#endif
    }
    if (*batch) {
      if (!batch_seed.empty()) b.seed = sk::cli::parse_number<uint64_t>("--seed", batch_seed);
      job.choice =
          sk::cli::resolve(batch_flags, {.lora = b.adapters.empty() ? "none" : "gathered"});
      if (job.choice.merge && b.adapters.size() != 1)
        sk::fail("batch: --lora merge folds one adapter into the weights; ", b.adapters.size(),
                 " --adapter given (several: --lora gathered, loop or segmented)");
      const auto tok = sk::text::Gpt2Tokenizer::from_dir(vocab_dir_for(b.vocab, b.model));
      if (b.model.empty())
        std::fprintf(stderr,
                     "servekit: no --model given: using a seeded random GPT-2 124M; its text is "
                     "meaningless.\n");
      job.tok = &tok;
      job.batch = &b;
      return run_compiled(job);
    }
    if (*bench) {
      if (!bench_seed.empty()) be.seed = sk::cli::parse_number<uint64_t>("--seed", bench_seed);
      const auto tok = sk::text::Gpt2Tokenizer::from_dir(vocab_dir_for(be.vocab, be.model));
      job.tok = &tok;
      job.bench = &be;
      return sk::cli::run_bench(be, bench_flags,
                                [&](const sk::cli::RunChoice& c) { return bench_session(job, c); });
    }
    if (gen->count("--prompt") + gen->count("--prompt-ids") + gen->count("text") == 0)
      sk::fail(
          "generate: give the prompt (servekit generate \"TEXT\", or --prompt TEXT, or "
          "--prompt-ids IDS)");
    if (gen->count("--prompt-ids"))
      g.prompt_ids = sk::cli::parse_ids("--prompt-ids", g.prompt_ids_text);
    if (!g.seed_text.empty()) g.seed = sk::cli::parse_number<uint64_t>("--seed", g.seed_text);
    if (!g.greedy &&
        gen->count("--temperature") + gen->count("--top-k") + gen->count("--top-p") == 0)
      g.greedy = true;  // no sampling option given: greedy, the reproducible default
    if (merge) sk::cli::detail::take(gen_flags.lora, "--lora", "merge", "--merge");
    job.choice =
        sk::cli::resolve(gen_flags, {.lora = g.adapter.empty() ? "none" : "gathered"}, true);
    if (job.choice.merge && g.adapter.empty())
      sk::fail("generate: --lora merge needs --adapter (the adapter to merge)");
    const auto tok = sk::text::Gpt2Tokenizer::from_dir(vocab_dir_for(g.vocab, g.model));
    if (g.model.empty())
      std::fprintf(
          stderr,
          "servekit: no --model given: using a seeded random GPT-2 124M (seed %llu); its text is "
          "meaningless. Pass --model DIR with a Hugging Face GPT-2 checkpoint for real text.\n",
          static_cast<unsigned long long>(g.seed));
    job.tok = &tok;
    job.generate = &g;
    return run_compiled(job);
  } catch (const std::exception& e) {
    if (sk::cli::g_stdout_mid_line) std::cout << std::endl;
    std::fprintf(stderr, "servekit: error: %s\n", e.what());
    return 2;
  }
}
