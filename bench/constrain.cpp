// SPDX-License-Identifier: Apache-2.0
// What structured generation costs: a batch of 16 JSON-schema-constrained requests against 16
// unconstrained ones through the same engine (GPT-2 124M dims, seeded random weights, host
// backend, f32), and the token mask's cost per constrained row and step, cold (the grammar's
// first sight of each state) and warm (its cache), beside the step time it is part of.
// Writes constrain.csv and constrain.png (gnuplot) into --out.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "schemas.hpp"
#include "servekit/constrain/token_mask.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/engine.hpp"
#include "servekit/text/vocab_dir.hpp"

namespace fs = std::filesystem;
namespace sk = servekit;
namespace serve = servekit::serve;
using json = nlohmann::json;
using Model = sk::Gpt2<sk::Config<sk::dims::Gpt2Small, sk::weights::F32, sk::kv::Contiguous>>;

namespace {

struct Run {
  double step_ms = 0, tokens_per_s = 0;
  long steps = 0, tokens = 0;
  std::vector<serve::Result> results;
};

Run run(Model& m, const sk::text::Gpt2Tokenizer& tok, int n, int new_tokens, bool constrained,
        const std::vector<std::shared_ptr<const sk::constrain::Grammar>>& gs) {
  serve::Engine<Model, serve::sched::Continuous> engine(m, tok, {.max_batch = n});
  std::vector<serve::RequestHandle> hs;
  for (int i = 0; i < n; i++) {
    serve::Request r;
    r.prompt = "Request " + std::to_string(i) + ": give the record as JSON.";
    r.sampling = {.temperature = 1.f, .seed = uint64_t(i + 1)};
    r.stop.max_new_tokens = new_tokens;
    r.stop.stop_at_eos = false;
    if (constrained) r.json_schema = gs[i % gs.size()];
    hs.push_back(engine.submit(r));
  }
  Run out;
  for (auto& h : hs) out.results.push_back(h.get());
  const auto s = engine.stats();
  out.steps = s.steps, out.tokens = s.generated_tokens;
  out.step_ms = 1e3 * s.busy_s / std::max(1L, s.steps);
  out.tokens_per_s = s.tokens_per_s();
  return out;
}

struct MaskCost {
  double mean_us = 0, p99_us = 0;
  long n = 0;
};

// Replays each result's tokens through a fresh Constraint, timing every mask: with fresh
// grammars (cold: each state's mask computed once, as the run did) or the same ones again
// (warm: every mask a cache hit).
MaskCost replay(const std::vector<serve::Result>& rs,
                const std::vector<std::shared_ptr<const sk::constrain::Grammar>>& gs,
                const sk::text::Gpt2Tokenizer& tok, int new_tokens) {
  const auto vocab = sk::constrain::Vocab::of(tok, Model::Dims::vocab, tok.eos_id());
  std::vector<double> us;
  for (std::size_t i = 0; i < rs.size(); i++) {
    sk::constrain::Constraint c(gs[i % gs.size()], vocab);
    int k = 0;
    for (const auto& t : rs[i].tokens) {
      const auto t0 = std::chrono::steady_clock::now();
      c.mask(new_tokens - k++);
      us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      c.advance(t.id, t.id == tok.eos_id() ? std::string_view() : tok.token_view(t.id));
    }
  }
  MaskCost m;
  m.n = static_cast<long>(us.size());
  if (us.empty()) return m;
  for (double u : us) m.mean_us += u / us.size();
  std::sort(us.begin(), us.end());
  m.p99_us = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  return m;
}

std::vector<std::shared_ptr<const sk::constrain::Grammar>> grammars() {
  std::vector<std::shared_ptr<const sk::constrain::Grammar>> gs;
  for (const char* s : sk::bench::kSchemas)
    gs.push_back(sk::constrain::compile_json_schema(std::string_view(s)));
  return gs;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"structured generation: constrained vs unconstrained batches, mask cost"};
  std::string out = "out/bench_constrain", vocab = sk::text::default_vocab_dir().string();
  int n = 16, new_tokens = 48;
  app.add_option("--out", out, "folder for the CSV and PNG");
  app.add_option("--vocab", vocab, "tokenizer folder");
  app.add_option("--batch", n, "requests per batch");
  app.add_option("--new-tokens", new_tokens, "max new tokens per request");
  CLI11_PARSE(app, argc, argv);
  try {
    fs::create_directories(out);
    auto tok = sk::text::Gpt2Tokenizer::from_dir(vocab);
    std::fprintf(stderr, "loading random GPT-2 124M (seed 0) ...\n");
    auto m = Model::random(0);
    std::printf("composition: %s, %u hardware threads, batch %d, up to %d new tokens\n",
                Model::name().c_str(), std::thread::hardware_concurrency(), n, new_tokens);
    std::fprintf(stderr, "unconstrained batch ...\n");
    const Run free = run(m, tok, n, new_tokens, false, {});
    std::fprintf(stderr, "constrained batch ...\n");
    const auto gs = grammars();
    const Run cons = run(m, tok, n, new_tokens, true, gs);
    int valid = 0;
    for (const auto& r : cons.results) {
      try {
        (void)json::parse(r.text);
        valid++;
      } catch (const json::exception&) {
      }
    }
    std::fprintf(stderr, "replaying the masks ...\n");
    const MaskCost cold = replay(cons.results, grammars(), tok, new_tokens);
    const MaskCost warm = replay(cons.results, gs, tok, new_tokens);
    std::printf("\n%-14s %9s %7s %9s %10s\n", "batch", "ms/step", "steps", "tokens", "tokens/s");
    std::printf("%-14s %9.1f %7ld %9ld %10.1f\n", "unconstrained", free.step_ms, free.steps,
                free.tokens, free.tokens_per_s);
    std::printf("%-14s %9.1f %7ld %9ld %10.1f   (%d of %d outputs parse)\n", "constrained",
                cons.step_ms, cons.steps, cons.tokens, cons.tokens_per_s, valid, n);
    std::printf("\nmask per constrained row and step (%ld masks):\n", cold.n);
    std::printf("  cold (first sight of each state): mean %8.1f us, p99 %8.1f us\n", cold.mean_us,
                cold.p99_us);
    std::printf("  warm (cache hits):                mean %8.1f us, p99 %8.1f us\n", warm.mean_us,
                warm.p99_us);
    std::printf("  one row's cold mask / unconstrained step: %.2f%% (target < 10%%)\n",
                100.0 * cold.mean_us / 1e3 / free.step_ms);
    std::printf("  constrained / unconstrained step time: %.3fx\n", cons.step_ms / free.step_ms);
    const fs::path csv = fs::path(out) / "constrain.csv";
    std::ofstream(csv) << "what,value\nunconstrained ms/step," << free.step_ms
                       << "\nconstrained ms/step," << cons.step_ms << "\ncold mask ms (mean),"
                       << cold.mean_us / 1e3 << "\ncold mask ms (p99)," << cold.p99_us / 1e3
                       << "\nwarm mask ms (mean)," << warm.mean_us / 1e3 << '\n';
    const fs::path gp = fs::path(out) / "constrain.gp";
    std::ofstream(gp) << "set terminal pngcairo size 800,450\nset output '"
                      << (fs::path(out) / "constrain.png").string()
                      << "'\nset datafile separator ','\nset style fill solid 0.8\nset boxwidth "
                         "0.5\nset grid y\nset logscale y\nset title 'Structured generation, "
                         "batch "
                      << n << " (" << Model::name()
                      << ", host)'\nset ylabel 'milliseconds (log)'\nset xtics rotate by -20\n"
                         "plot '"
                      << csv.string()
                      << "' every ::1 using 0:2:xtic(1) with boxes lc rgb '#1f77b4' notitle\n";
    if (std::system(("gnuplot '" + gp.string() + "' 2>/dev/null").c_str()) != 0)
      std::fprintf(stderr, "(gnuplot failed or missing: no PNG)\n");
    std::printf("\nCSV and PNG in %s\n", out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_constrain: error: %s\n", e.what());
    return 2;
  }
}
