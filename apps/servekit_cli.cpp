// SPDX-License-Identifier: Apache-2.0
// servekit: the command line. `tokenize` turns JSON lines of text into ids; `generate` runs a
// GPT-2 checkpoint (HF layout) or, without one, a seeded random GPT-2 124M; `batch` runs a file
// of requests through the serving engine; `serve` answers HTTP (LoRAX / TGI and OpenAI APIs).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "bench_table.hpp"
#include "cli_common.hpp"
#include "commands.hpp"
#include "job.hpp"
#if !defined(SERVEKIT_CLI_NO_SERVE)
#include "serve_main.hpp"
#endif
#include "servekit/core/thread_pool.hpp"
#include "servekit/serve/compiled.hpp"
#include "servekit/text/tokenizer.hpp"

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
  int threads = 0;  // the host kernels' (core/thread_pool.hpp), for the four below
  sk::cli::GenerateCommand gen(app, threads);
  sk::cli::BatchCommand batch(app, threads);
  sk::cli::ServeCommand srv(app, threads);
  sk::cli::BenchCommand bench(app, threads);

  // Unknown flags are collected, not rejected by CLI11, so that the error can suggest the
  // nearest known one.
  const auto subs = {tokenize, gen.sub, batch.sub, srv.sub, bench.sub};
  for (auto* sub : subs) sub->allow_extras();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto* sub : subs)
    if (*sub && !sub->remaining().empty()) {
      std::fprintf(stderr, "servekit %s: error: %s\n", sub->get_name().c_str(),
                   sk::cli::unknown_args_message(*sub).c_str());
      return 2;
    }
  try {
    if (threads > 0) sk::set_host_threads(threads);
    if (*tokenize) return run_tokenize(tok_vocab);
    if (*srv.sub) {
      [[maybe_unused]] sk::cli::Job job = srv.job();
#if defined(SERVEKIT_CLI_NO_SERVE)  // the sanitizer build (apps/run_composition.hpp)
      sk::fail("this sanitizer build has no `serve` subcommand");
#else
      sk::cli::Served served;
      job.serve_out = &served;
      run_compiled(job);
      return sk::cli::run_server(*served.engine, served.device, *job.tok, srv.a);
#endif
    }
    if (*batch.sub) return run_compiled(batch.job());
    if (*bench.sub) {
      const sk::cli::Job job = bench.job();
      return sk::cli::run_bench(bench.a, bench.flags,
                                [&](const sk::cli::RunChoice& c) { return bench_session(job, c); });
    }
    return run_compiled(gen.job());
  } catch (const std::exception& e) {
    if (sk::cli::g_stdout_mid_line) std::cout << std::endl;
    std::fprintf(stderr, "servekit: error: %s\n", e.what());
    return 2;
  }
}
