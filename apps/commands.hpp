// SPDX-License-Identifier: Apache-2.0
#pragma once
// The subcommands that run a composition: generate, batch, serve and bench. Each declares its
// flags on the app, then, once parsed, checks what the flags alone cannot and fills the Job
// that main() hands to the composition (apps/job.hpp). The tokenizer a job points at lives in
// its command.
#include <pthread.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "cli_common.hpp"
#include "command_flags.hpp"
#include "composition_flags.hpp"
#include "speculative_flags.hpp"
#include "job.hpp"
#include "servekit/core/error.hpp"
#include "servekit/text/tokenizer.hpp"

namespace servekit::cli {

namespace detail {
inline const text::Gpt2Tokenizer& load_tokenizer(std::optional<text::Gpt2Tokenizer>& tok,
                                                 const std::string& vocab,
                                                 const std::string& model) {
  return tok.emplace(text::Gpt2Tokenizer::from_dir(text::vocab_dir_for(vocab, model)));
}
}  // namespace detail

struct GenerateCommand {
  CLI::App* sub;
  GenerateArgs a;
  CompositionFlags flags;
  SpeculativeFlags spec;
  bool merge = false;
  std::string positional;
  std::optional<text::Gpt2Tokenizer> tok;

  GenerateCommand(CLI::App& app, int& threads)
      : sub(app.add_subcommand("generate", "generate a continuation of a prompt")) {
    add_model_flags(sub, threads, flags, false, a.model, a.vocab);
    auto* ptext = sub->add_option("--prompt", a.prompt, "prompt text");
    auto* ppos = sub->add_option("text", positional, "prompt text (the same as --prompt)");
    ppos->excludes(ptext);
    auto* pids =
        sub->add_option("--prompt-ids", a.prompt_ids_text, "prompt as token ids (comma-separated)");
    ptext->excludes(pids);
    ppos->excludes(pids);
    sub->add_option("-n,--max-new-tokens", a.max_new_tokens, "tokens to generate")
        ->check(CLI::NonNegativeNumber);
    auto* greedy = sub->add_flag("--greedy", a.greedy, "greedy decoding (argmax)");
    auto* temp = sub->add_option("--temperature", a.temperature,
                                 "sampling temperature (0: greedy, as in HF)");
    auto* topk = sub->add_option("--top-k", a.top_k, "keep the k most likely tokens (0: off)");
    auto* topp = sub->add_option("--top-p", a.top_p, "nucleus sampling mass (1: off)");
    greedy->excludes(temp)->excludes(topk)->excludes(topp);
    sub->add_option("--seed", a.seed_text,
                    "seed for sampling and for the random model (0 to 2^64-1)");
    sub->add_option("--stop", a.stop, "stop string (repeatable)");
    sub->add_option("--adapter", a.adapter,
                    "PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors)");
    sub->add_flag("--merge", merge,
                  "merge the adapter into the weights at load (--lora merge; default: apply it "
                  "at run time, --lora gathered)")
        ->needs(sub->get_option("--adapter"));
    sub->add_flag("--ignore-eos", a.ignore_eos, "keep generating after <|endoftext|>");
    auto* schema = sub->add_option(
        "--json-schema", a.json_schema,
        "a JSON schema file: the output is JSON that fits it (structured generation)");
    auto* regex = sub->add_option("--regex", a.regex,
                                  "a regular expression the whole output matches (ASCII)");
    auto* choice = sub->add_option("--choice", a.choices,
                                   "the output is exactly one of these texts (repeatable)")
                       ->allow_extra_args(false);  // one text each: the prompt stays positional
    auto* grammar = sub->add_option("--grammar", a.grammar,
                                    "a GBNF grammar file (llama.cpp's notation): the whole output "
                                    "is a text of its rule root");
    schema->excludes(regex)->excludes(choice)->excludes(grammar);
    regex->excludes(choice)->excludes(grammar);
    choice->excludes(grammar);
    sub->add_flag("--no-cache", a.no_cache,
                  "recompute the whole sequence every step (no KV cache)");
    sub->add_flag("--json", a.as_json, "print one JSON object: ids, text, timings");
    sub->add_option("--top-logprobs", a.top_logprobs,
                    "log-probabilities of the K best alternatives per token (a JSON field with "
                    "--json, else a table after the text)")
        ->check(CLI::NonNegativeNumber);
    add_speculative_flags(sub, spec);
  }

  Job job() {
    if (!positional.empty()) a.prompt = positional;
    if (sub->count("--prompt") + sub->count("--prompt-ids") + sub->count("text") == 0)
      fail(
          "generate: give the prompt (servekit generate \"TEXT\", or --prompt TEXT, or "
          "--prompt-ids IDS)");
    if (sub->count("--prompt-ids")) a.prompt_ids = parse_ids("--prompt-ids", a.prompt_ids_text);
    if (!a.seed_text.empty()) a.seed = parse_number<uint64_t>("--seed", a.seed_text);
    if (!a.greedy &&
        sub->count("--temperature") + sub->count("--top-k") + sub->count("--top-p") == 0)
      a.greedy = true;  // no sampling option given: greedy, the reproducible default
    if (merge) detail::take(flags.lora, "--lora", "merge", "--merge");
    a.speculative = parse_speculative(spec, 1);
    if (a.speculative.on() && a.no_cache)
      fail("--speculative verifies proposals against the KV cache: it cannot go with --no-cache");
    Job job;
    job.choice = resolve(flags, {.lora = a.adapter.empty() ? "none" : "gathered"}, true);
    if (job.choice.merge && a.adapter.empty())
      fail("generate: --lora merge needs --adapter (the adapter to merge)");
    job.tok = &detail::load_tokenizer(tok, a.vocab, a.model);
    if (a.model.empty())
      std::fprintf(
          stderr,
          "servekit: no --model given: using a seeded random GPT-2 124M (seed %llu); its text is "
          "meaningless. Pass --model DIR with a Hugging Face GPT-2 checkpoint for real text.\n",
          static_cast<unsigned long long>(a.seed));
    job.generate = &a;
    return job;
  }
};

struct BatchCommand {
  CLI::App* sub;
  BatchArgs a;
  CompositionFlags flags;
  SpeculativeFlags spec;
  std::string seed;
  std::optional<text::Gpt2Tokenizer> tok;

  BatchCommand(CLI::App& app, int& threads)
      : sub(app.add_subcommand("batch",
                               "run a file of requests (JSON lines) through the serving engine")) {
    add_model_flags(sub, threads, flags, true, a.model, a.vocab);
    sub->add_option("--input", a.input,
                    "JSON lines: {\"prompt\": ..., \"max_new_tokens\": ..., \"temperature\": ...}")
        ->required();
    sub->add_option("--output", a.output, "result JSON lines (default: stdout)");
    sub->add_option("--max-batch", a.max_batch, "sequences running at once")
        ->check(CLI::Range(1, 4096));
    sub->add_option("--max-batched-tokens", a.max_batched_tokens,
                    "new tokens per step (continuous; longer prompts are chunked)")
        ->check(CLI::Range(1, 1 << 20));
    sub->add_option("--adapter", a.adapters,
                    "PEFT LoRA adapter folder (repeatable); a line's \"adapter\" names one by its "
                    "folder name");
    add_prefix_flags(sub, a.no_prefix_caching, a.prefix_cache_blocks);
    add_jump_flag(sub, a.no_jump_forward);
    add_policy_flag(sub, a.scheduling_policy);
    add_speculative_flags(sub, spec);
    add_memory_flags(sub, a.kv_blocks, a.memory_limit, a.adapter_host_bytes,
                     a.adapter_device_bytes);
    sub->add_option("--seed", seed, "seed of the random model (without --model)");
  }

  Job job() {
    if (!seed.empty()) a.seed = parse_number<uint64_t>("--seed", seed);
    a.speculative = parse_speculative(spec, a.max_batch);
    Job job;
    job.choice = resolve(flags, {.lora = a.adapters.empty() ? "none" : "gathered"});
    if (job.choice.merge && a.adapters.size() != 1)
      fail("batch: --lora merge folds one adapter into the weights; ", a.adapters.size(),
           " --adapter given (several: --lora gathered, loop or segmented)");
    job.tok = &detail::load_tokenizer(tok, a.vocab, a.model);
    if (a.model.empty())
      std::fprintf(stderr,
                   "servekit: no --model given: using a seeded random GPT-2 124M; its text is "
                   "meaningless.\n");
    job.batch = &a;
    return job;
  }
};

struct ServeCommand {
  CLI::App* sub;
  ServeArgs a;
  CompositionFlags flags;
  SpeculativeFlags spec;
  std::string seed;
  std::optional<text::Gpt2Tokenizer> tok;

  ServeCommand(CLI::App& app, int& threads)
      : sub(app.add_subcommand(
            "serve",
            "HTTP server: LoRAX / text-generation-inference and OpenAI completions APIs")) {
    add_model_flags(sub, threads, flags, true, a.model, a.vocab);
    sub->add_option("--adapter,--adapters", a.adapters,
                    "LoRA adapters: ID=DIR, an adapter folder (id: its name), or a folder of them "
                    "(ids: their paths below it, e.g. predibase/cnn); repeatable");
    sub->add_option("--host", a.host, "address to listen on (default: loopback only)");
    sub->add_option("--port", a.port, "port (0: any free one, printed at start)")
        ->check(CLI::Range(0, 65535));
    sub->add_option("--model-id", a.model_id,
                    "the base model's name in /info and OpenAI's `model` (default: folder name)");
    sub->add_option("--max-batch", a.max_batch, "sequences running at once")
        ->check(CLI::Range(1, 4096));
    sub->add_option("--max-batched-tokens", a.max_batched_tokens,
                    "new tokens per step (longer prompts are chunked)")
        ->check(CLI::Range(1, 1 << 20));
    add_memory_flags(sub, a.kv_blocks, a.memory_limit, a.adapter_host_bytes,
                     a.adapter_device_bytes);
    add_prefix_flags(sub, a.no_prefix_caching, a.prefix_cache_blocks);
    add_jump_flag(sub, a.no_jump_forward);
    add_policy_flag(sub, a.scheduling_policy);
    add_speculative_flags(sub, spec);
    sub->add_option("--max-pending", a.max_pending,
                    "requests admitted at once (waiting + running); more get 429")
        ->check(CLI::Range(1, 1 << 16));
    sub->add_option("--default-max-new-tokens", a.default_max_new_tokens,
                    "max_new_tokens when a request gives none")
        ->check(CLI::Range(1, 1 << 20));
    sub->add_option("--shutdown-grace", a.shutdown_grace_s,
                    "seconds admitted requests may run after SIGINT/SIGTERM before they are "
                    "cancelled")
        ->check(CLI::NonNegativeNumber);
    sub->add_option("--read-timeout", a.read_timeout_s,
                    "seconds a connection has to send a whole request (from its start, or from "
                    "the previous answer); then it is closed (408 if it had begun)")
        ->check(CLI::Range(0.01, 3600.0));
    sub->add_option("--max-waiting-per-client", a.max_waiting_per_client,
                    "connections one client address may hold before their requests are whole; "
                    "past it, its oldest is closed")
        ->check(CLI::Range(1, 1 << 20));
    sub->add_flag("--no-adapter-paths", a.no_adapter_paths,
                  "refuse adapter_source \"local\" (requests naming a folder on this machine)");
    sub->add_flag("-q,--quiet", a.quiet, "no log line per request");
    sub->add_option("--seed", seed, "seed of the random model (without --model)");
  }

  Job job() {
    if (!seed.empty()) a.seed = parse_number<uint64_t>("--seed", seed);
    a.speculative = parse_speculative(spec, a.max_batch);
    Job job;
    job.choice = resolve(flags, {.kv = "paged16", .lora = "gathered"});
    // SIGINT / SIGTERM blocked before the engine's and the server's threads exist (the server
    // takes them on a thread of its own); a client gone mid-write is an error return.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
    job.tok = &detail::load_tokenizer(tok, a.vocab, a.model);
    if (a.model.empty())
      std::fprintf(stderr,
                   "servekit serve: no --model given: serving a seeded random GPT-2 124M; its "
                   "text is meaningless.\n");
    job.serve = &a;
    return job;
  }
};

struct BenchCommand {
  CLI::App* sub;
  BenchArgs a;
  CompositionFlags flags;
  std::string seed;
  std::optional<text::Gpt2Tokenizer> tok;

  BenchCommand(CLI::App& app, int& threads)
      : sub(app.add_subcommand(
            "bench", "compare compositions: prefill and decode tokens/s, TTFT and TPOT, memory")) {
    add_model_flags(sub, threads, flags, true, a.model, a.vocab);
    sub->add_option("--compare", a.compare,
                    "AXIS=V1,V2,...: the compositions compared, the other axes from the flags "
                    "(e.g. weights=f32,f16,bf16,u8; kv=contiguous,paged16-f16; "
                    "lora=loop,gathered; scheduler=...; backend=host,emulated)");
    sub->add_option("--batch", a.batches, "batch sizes (comma-separated)")
        ->delimiter(',')
        ->check(CLI::Range(1, 1024));
    sub->add_option("--prompt", a.prompt, "prompt tokens per request")
        ->check(CLI::Range(1, 1 << 16));
    sub->add_option("--new", a.new_tokens, "generated tokens per request")
        ->check(CLI::Range(2, 1 << 16));
    sub->add_option("--rounds", a.rounds, "rounds (each runs every composition once)")
        ->check(CLI::Range(1, 1000));
    sub->add_option("--adapters", a.adapters, "random LoRA adapters, one per request in turn")
        ->check(CLI::Range(0, 1024));
    sub->add_option("--rate", a.rate,
                    "requests per second arriving at random (Poisson) instead of one batch at "
                    "once: --requests of mixed lengths, --batch the engine's max batch "
                    "(compares schedulers)")
        ->check(CLI::Range(0.0, 1e6));
    sub->add_option("--requests", a.requests, "requests per run with --rate")
        ->check(CLI::Range(1, 100000));
    sub->add_option("--out", a.out, "CSV and PNG path without extension");
    sub->add_option("--seed", seed, "seed of the random model and prompts");
  }

  // The base of each composition's job (run_bench sets the choice).
  Job job() {
    if (!seed.empty()) a.seed = parse_number<uint64_t>("--seed", seed);
    Job job;
    job.tok = &detail::load_tokenizer(tok, a.vocab, a.model);
    job.bench = &a;
    return job;
  }
};

}  // namespace servekit::cli
