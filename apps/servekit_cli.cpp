// SPDX-License-Identifier: Apache-2.0
// servekit: the command line. `tokenize` turns JSON lines of text into ids; `generate` runs a
// GPT-2 checkpoint (HF layout) or, without one, a seeded random GPT-2 124M; `batch` runs a file
// of requests through the serving engine; `serve` answers HTTP (LoRAX / TGI and OpenAI APIs).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "servekit/model/dispatch.hpp"
#include "servekit/lora/adapter.hpp"
#include "servekit/model/merge_lora.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/generate.hpp"
#include "servekit/text/tokenizer.hpp"
#include "batch.hpp"
#include "serve.hpp"
#include "cli_common.hpp"

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

struct GenerateArgs {
  std::string model, vocab, prompt, adapter, prompt_ids_text, seed_text, json_schema;
  bool merge = false;
  std::vector<int32_t> prompt_ids;
  int max_new_tokens = 32, top_k = 0, top_logprobs = 0;
  bool greedy = false, no_cache = false, as_json = false, ignore_eos = false;
  float temperature = 1.f, top_p = 1.f;
  uint64_t seed = 0;
  std::vector<std::string> stop;
};

// Whether stdout holds a partial line (the echoed prompt and its continuation): an error
// then starts a new line, so that it is not glued to the text.
bool g_stdout_mid_line = false;

template <class D>
sk::model::Gpt2Tensors base_tensors(const GenerateArgs& a) {
  if (a.model.empty()) return sk::model::random_gpt2<D>(a.seed);
  if (a.as_json) return sk::model::load_gpt2<D>(a.model);  // scripts read the JSON's timings
  // A large checkpoint takes seconds to read: say what is happening.
  std::fprintf(stderr, "servekit: loading %s (%s) ...", a.model.c_str(),
               std::string(D::name).c_str());
  const auto t0 = std::chrono::steady_clock::now();
  sk::model::Gpt2Tensors t;
  try {
    t = sk::model::load_gpt2<D>(a.model);
  } catch (...) {
    std::fprintf(stderr, "\n");  // the error goes on its own line, not after "loading ..."
    throw;
  }
  std::fprintf(stderr, " %.1f s\n",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return t;
}

template <class Model>
int generate_with(Model& model, const GenerateArgs& a, const sk::text::Gpt2Tokenizer& tok,
                  int32_t adapter);

// The model the options ask for: the base weights, an adapter merged into them (--merge), or
// the base weights with the adapter beside them, applied at run time (lora::Gathered).
template <class D>
int run_generate(const GenerateArgs& a, const sk::text::Gpt2Tokenizer& tok) {
  using Model = sk::Gpt2<sk::Config<D>>;
  if (a.adapter.empty()) {
    Model model(base_tensors<D>(a));
    return generate_with(model, a, tok, -1);
  }
  auto adapter = sk::lora::load_adapter<D>(a.adapter);
  auto t = base_tensors<D>(a);
  if (a.merge) {
    sk::lora::merge(t, adapter);
    Model model(std::move(t));
    return generate_with(model, a, tok, -1);
  }
  sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Contiguous, sk::lora::Gathered>> model(
      std::move(t));
  const int slot = model.add_adapter(std::move(adapter));
  return generate_with(model, a, tok, slot);
}

template <class Model>
int generate_with(Model& model, const GenerateArgs& a, const sk::text::Gpt2Tokenizer& tok,
                  int32_t adapter) {
  using D = typename Model::Dims;
  auto prompt = a.prompt_ids.empty() ? tok.encode(a.prompt) : a.prompt_ids;
  if (prompt.empty()) sk::fail("the prompt is empty: give --prompt TEXT or --prompt-ids");
  for (std::size_t i = 0; i < prompt.size(); i++)
    if (prompt[i] < 0 || prompt[i] >= D::vocab)
      sk::fail(
          "prompt token ", i, " has id ", prompt[i], ", outside the vocabulary [0, ", D::vocab,
          ") of ", D::name,
          a.prompt_ids.empty() ? " (the tokenizer's vocabulary is larger than the model's)" : "");
  sk::serve::GenerateOptions opt;
  opt.sampling.temperature = a.greedy ? 0.f : a.temperature;
  opt.sampling.top_k = a.top_k;
  opt.sampling.top_p = a.top_p;
  opt.sampling.seed = a.seed;
  opt.stop.max_new_tokens = a.max_new_tokens;
  opt.stop.stop_at_eos = !a.ignore_eos;
  opt.stop.stop_strings = a.stop;
  opt.use_cache = !a.no_cache;
  opt.top_logprobs = a.top_logprobs;
  opt.adapter = adapter;
  if (!a.json_schema.empty()) {
    try {
      opt.json_schema = sk::constrain::compile_json_schema(sk::read_json_file(a.json_schema));
    } catch (const sk::Error& e) {
      sk::fail("--json-schema ", a.json_schema, ": ", e.what());
    }
  }

  sk::serve::StreamCallback stream;
  const std::string prompt_text = a.prompt_ids.empty() ? a.prompt : tok.decode(prompt);
  if (!a.as_json) {
    std::cout << prompt_text << std::flush;
    g_stdout_mid_line = true;
    stream = [](std::string_view piece, const sk::serve::GeneratedToken&) {
      std::cout << piece << std::flush;
      return true;
    };
  }
  auto r = sk::serve::generate(model, tok, prompt, opt, stream);
  const double decode_ms = r.metrics.e2e_ms - r.metrics.ttft_ms;
  const double tps = r.tokens.size() > 1 ? (r.tokens.size() - 1) / (decode_ms / 1e3) : 0.0;
  if (!a.as_json) {
    std::cout << std::endl;  // flushed before the stats line on stderr
    g_stdout_mid_line = false;
    if (a.top_logprobs > 0) {  // one line per generated token: its logprob, then the best K
      std::cout << "top logprobs:\n";
      for (std::size_t i = 0; i < r.tokens.size(); i++) {
        const auto& t = r.tokens[i];
        // A token may be part of a UTF-8 character: shown JSON-quoted, the part replaced.
        std::cout << "  " << i << " " << sk::cli::dump(tok.token_bytes(t.id)) << " " << t.logprob
                  << " |";
        for (const auto& alt : t.top)
          std::cout << " " << sk::cli::dump(tok.token_bytes(alt.id)) << " " << alt.logprob;
        std::cout << "\n";
      }
      std::cout << std::flush;
    }
    std::fprintf(
        stderr, "[%s] %zu prompt + %zu new tokens, finish: %s, TTFT %.1f ms, %.2f tok/s after it\n",
        Model::name().c_str(), prompt.size(), r.tokens.size(), r.finish_reason.c_str(),
        r.metrics.ttft_ms, tps);
    return 0;
  }
  json j;
  j["model"] = a.model.empty() ? "random-gpt2-124M" : a.model;
  j["config"] = Model::name();
  if (!a.adapter.empty()) j["adapter"] = {{"path", a.adapter}, {"merged", a.merge}};
  j["prompt"] = prompt_text;
  j["prompt_ids"] = r.prompt_ids;
  j["generated_ids"] = r.ids();
  j["text"] = r.text;
  j["finish_reason"] = r.finish_reason;
  json ms = json::array();
  for (auto& t : r.tokens) ms.push_back(t.ms);
  j["timings"] = {{"ttft_ms", r.metrics.ttft_ms},
                  {"total_ms", r.metrics.e2e_ms},
                  {"decode_tokens_per_s", tps},
                  {"token_ms", ms},
                  {"kv_cache", !a.no_cache}};
  if (a.top_logprobs > 0) {
    json toks = json::array();
    for (auto& t : r.tokens) {
      json top = json::array();
      for (auto& alt : t.top)
        top.push_back(
            {{"id", alt.id}, {"text", tok.token_bytes(alt.id)}, {"logprob", alt.logprob}});
      toks.push_back({{"id", t.id},
                      {"text", tok.token_bytes(t.id)},
                      {"logprob", t.logprob},
                      {"top_logprobs", top}});
    }
    j["tokens"] = toks;
  }
  std::cout << dump(j) << std::endl;
  return 0;
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

  GenerateArgs g;
  auto* gen = app.add_subcommand("generate", "generate a continuation of a prompt");
  add_threads(gen);
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
  gen->add_flag("--merge", g.merge,
                "merge the adapter into the weights at load (default: apply it at run time)")
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
  auto* batch =
      app.add_subcommand("batch", "run a file of requests (JSON lines) through the serving engine");
  add_threads(batch);
  batch->add_option(
      "--model", b.model,
      "HF GPT-2 folder (config.json + model.safetensors); default: random GPT-2 124M");
  batch->add_option("--vocab", b.vocab, kVocabHelp);
  batch
      ->add_option("--input", b.input,
                   "JSON lines: {\"prompt\": ..., \"max_new_tokens\": ..., \"temperature\": ...}")
      ->required();
  batch->add_option("--output", b.output, "result JSON lines (default: stdout)");
  batch->add_option("--scheduler", b.scheduler, "continuous | static | sequential")
      ->check(CLI::IsMember({"continuous", "static", "sequential"}));
  batch->add_option("--max-batch", b.max_batch, "sequences running at once")
      ->check(CLI::Range(1, 4096));
  batch
      ->add_option("--max-batched-tokens", b.max_batched_tokens,
                   "new tokens per step (continuous; longer prompts are chunked)")
      ->check(CLI::Range(1, 1 << 20));
  batch->add_option("--adapter", b.adapters,
                    "PEFT LoRA adapter folder (repeatable); a line's \"adapter\" names one by its "
                    "folder name");
  std::string batch_seed;
  batch->add_option("--seed", batch_seed, "seed of the random model (without --model)");

  sk::cli::ServeArgs sv;
  auto* srv = app.add_subcommand(
      "serve", "HTTP server: LoRAX / text-generation-inference and OpenAI completions APIs");
  add_threads(srv);
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
  srv->add_option("--kv-blocks", sv.kv_blocks,
                  "KV-cache blocks of 16 tokens (0: max-batch full-length sequences)")
      ->check(CLI::NonNegativeNumber);
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

  // Unknown flags are collected, not rejected by CLI11, so that the error can suggest the
  // nearest known one.
  for (auto* sub : {tokenize, gen, batch, srv}) sub->allow_extras();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto* sub : {tokenize, gen, batch, srv})
    if (*sub && !sub->remaining().empty()) {
      std::fprintf(stderr, "servekit %s: error: %s\n", sub->get_name().c_str(),
                   sk::cli::unknown_args_message(*sub).c_str());
      return 2;
    }
  if (!positional.empty()) g.prompt = positional;
  try {
    if (threads > 0) sk::set_host_threads(threads);
    if (*tokenize) return run_tokenize(tok_vocab);
    if (*srv) {
      if (!serve_seed.empty()) sv.seed = sk::cli::parse_number<uint64_t>("--seed", serve_seed);
      return sk::cli::run_serve(sv);
    }
    if (*batch) {
      if (!batch_seed.empty()) b.seed = sk::cli::parse_number<uint64_t>("--seed", batch_seed);
      auto tok = sk::text::Gpt2Tokenizer::from_dir(vocab_dir_for(b.vocab, b.model));
      if (b.model.empty()) {
        std::fprintf(stderr,
                     "servekit: no --model given: using a seeded random GPT-2 124M; its text is "
                     "meaningless.\n");
        return sk::cli::run_batch<sk::dims::Gpt2Small>(b, tok);
      }
      auto cfg = sk::model::read_gpt2_config(fs::path(b.model) / "config.json");
      return sk::dispatch_dims(
          cfg, [&]<class D>(std::type_identity<D>) { return sk::cli::run_batch<D>(b, tok); });
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
    auto tok = sk::text::Gpt2Tokenizer::from_dir(vocab_dir_for(g.vocab, g.model));
    if (g.model.empty()) {
      std::fprintf(
          stderr,
          "servekit: no --model given: using a seeded random GPT-2 124M (seed %llu); its text is "
          "meaningless. Pass --model DIR with a Hugging Face GPT-2 checkpoint for real text.\n",
          static_cast<unsigned long long>(g.seed));
      return run_generate<sk::dims::Gpt2Small>(g, tok);
    }
    auto cfg = sk::model::read_gpt2_config(fs::path(g.model) / "config.json");
    return sk::dispatch_dims(
        cfg, [&]<class D>(std::type_identity<D>) { return run_generate<D>(g, tok); });
  } catch (const std::exception& e) {
    if (g_stdout_mid_line) std::cout << std::endl;
    std::fprintf(stderr, "servekit: error: %s\n", e.what());
    return 2;
  }
}
