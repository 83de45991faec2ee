// SPDX-License-Identifier: Apache-2.0
// Jump-forward on the schema corpus: the same constrained requests through the same engine
// with the grammar's forced tokens written a step each and appended at once
// (EngineOptions::jump_forward), the tokens checked equal, and per schema the tokens per
// forward pass (a request's tokens over the steps that drew one of them: forced tokens ride in
// the next step's input), beside the engine's steps and time. GPT-2 124M dims, seeded random
// weights, host backend, f32: what the requests write is noise, only its shape is the schema's.
// Writes jump_forward.csv and jump_forward.png (gnuplot) into --out.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "servekit/model/gpt2.hpp"
#include "servekit/serve/engine.hpp"
#include "servekit/text/vocab_dir.hpp"

namespace fs = std::filesystem;
namespace sk = servekit;
namespace serve = servekit::serve;
using json = nlohmann::json;
using Model = sk::Gpt2<sk::Config<sk::dims::Gpt2Small, sk::weights::F32, sk::kv::Paged<16>>>;

namespace {

struct Run {
  std::vector<serve::Result> results;
  long steps = 0;
  double seconds = 0;
};

Run run(Model& m, const sk::text::Gpt2Tokenizer& tok, const std::vector<serve::Request>& rs,
        int batch, bool jump) {
  serve::EngineOptions o;
  o.max_batch = batch;
  o.jump_forward = jump;
  serve::Engine<Model, serve::sched::Continuous> engine(m, tok, o);
  const auto t0 = std::chrono::steady_clock::now();
  Run out;
  out.results = engine.run_all(rs);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  engine.wait_idle();
  out.steps = engine.stats().steps;
  return out;
}

bool same(const serve::Result& a, const serve::Result& b) {
  if (a.ids() != b.ids() || a.text != b.text) return false;
  for (std::size_t t = 0; t < a.tokens.size(); t++)
    if (a.tokens[t].logprob != b.tokens[t].logprob) return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"jump-forward: tokens per forward pass on the schema corpus"};
  std::string out = "out/bench_jump_forward", vocab = sk::text::default_vocab_dir().string();
  std::string corpus = "tests/constrain/schemas.json";
  int seeds = 4, batch = 16, new_tokens = 64, rounds = 2;
  app.add_option("--out", out, "folder for the CSV and PNG");
  app.add_option("--vocab", vocab, "tokenizer folder");
  app.add_option("--schemas", corpus, "JSON array of schemas");
  app.add_option("--seeds", seeds, "sampled requests per schema");
  app.add_option("--batch", batch, "the engine's max batch");
  app.add_option("--new-tokens", new_tokens, "max new tokens per request");
  app.add_option("--rounds", rounds, "rounds of the two, alternated (the fastest of each kept)")
      ->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);
  try {
    fs::create_directories(out);
    auto tok = sk::text::Gpt2Tokenizer::from_dir(vocab);
    std::ifstream in(corpus);
    if (!in) sk::fail("bench_jump_forward: cannot open the schemas ", corpus);
    const json schemas = json::parse(in);
    // Each run compiles the schemas afresh, so that neither finds the other's masks cached.
    std::vector<int> schema_of;
    int refused = 0;
    auto requests = [&] {
      std::vector<serve::Request> rs;
      schema_of.clear(), refused = 0;
      for (std::size_t i = 0; i < schemas.size(); i++) {
        std::shared_ptr<const sk::constrain::Grammar> g;
        try {
          g = sk::constrain::compile_json_schema(schemas[i]);
        } catch (const std::exception&) {
          refused++;
          continue;
        }
        for (int k = 0; k < seeds; k++) {
          serve::Request r;
          r.prompt = "Record " + std::to_string(k) + " as JSON:";
          r.sampling = {.temperature = 1.f, .seed = uint64_t(100 * i + k)};
          r.stop.max_new_tokens = new_tokens;
          r.json_schema = g;
          rs.push_back(r);
          schema_of.push_back(static_cast<int>(i));
        }
      }
      return rs;
    };
    const std::vector<serve::Request> rs = requests();
    std::fprintf(stderr, "loading random GPT-2 124M (seed 0) ...\n");
    auto m = Model::random(0);
    std::printf("composition: %s; %zu requests (%zu schemas x %d seeds, %d refused), batch %d\n",
                Model::name().c_str(), rs.size(), schemas.size() - refused, seeds, refused, batch);
    // Rounds alternate the two; each keeps its fastest round.
    Run off, on;
    for (int round = 0; round < rounds; round++)
      for (bool jump : {false, true}) {
        std::fprintf(stderr, "round %d/%d: %s ...\n", round + 1, rounds,
                     jump ? "jump-forward" : "a step per token");
        Run r = run(m, tok, requests(), batch, jump);
        Run& best = jump ? on : off;
        if (round == 0 || r.seconds < best.seconds) best = std::move(r);
      }

    // Per schema: tokens, forced tokens, tokens per forward (tokens / drawn tokens).
    std::vector<long> tokens(schemas.size()), forced(schemas.size());
    int equal = 0;
    for (std::size_t i = 0; i < rs.size(); i++) {
      equal += same(off.results[i], on.results[i]);
      tokens[schema_of[i]] += static_cast<long>(on.results[i].tokens.size());
      forced[schema_of[i]] += on.results[i].metrics.forced_tokens;
    }
    const fs::path csv = fs::path(out) / "jump_forward.csv";
    std::ofstream c(csv);
    c << "schema,tokens,forced,tokens_per_forward\n";
    long all = 0, all_forced = 0;
    std::vector<double> per;
    std::printf("\n%6s %8s %8s %18s\n", "schema", "tokens", "forced", "tokens/forward");
    for (std::size_t s = 0; s < schemas.size(); s++) {
      if (tokens[s] == 0) continue;
      const double tpf = double(tokens[s]) / std::max(1L, tokens[s] - forced[s]);
      per.push_back(tpf);
      all += tokens[s], all_forced += forced[s];
      std::printf("%6zu %8ld %8ld %18.2f\n", s, tokens[s], forced[s], tpf);
      c << s << ',' << tokens[s] << ',' << forced[s] << ',' << tpf << '\n';
    }
    c.close();
    std::sort(per.begin(), per.end());
    std::printf(
        "\nall schemas: %ld tokens, %ld forced: %.3f tokens per forward (median schema "
        "%.2f, best %.2f)\n",
        all, all_forced, double(all) / std::max(1L, all - all_forced),
        per.empty() ? 0.0 : per[per.size() / 2], per.empty() ? 0.0 : per.back());
    std::printf(
        "engine, fastest of %d rounds: a step per token %ld steps in %.2f s; jump-forward %ld "
        "steps in %.2f s (%.3fx the steps, %.3fx the time)\n",
        rounds, off.steps, off.seconds, on.steps, on.seconds, double(on.steps) / off.steps,
        on.seconds / off.seconds);
    std::printf("tokens and logprobs equal with and without: %d of %zu requests\n", equal,
                rs.size());
    const fs::path gp = fs::path(out) / "jump_forward.gp";
    std::ofstream(gp) << "set terminal pngcairo size 900,420\nset output '"
                      << (fs::path(out) / "jump_forward.png").string()
                      << "'\nset datafile separator ','\nset style fill solid 0.8\nset boxwidth "
                         "0.6\nset grid y\nset yrange [0:*]\nset xrange [-1:*]\nset title "
                         "'Jump-forward: tokens per "
                         "forward pass per schema ("
                      << seeds
                      << " sampled requests each, random GPT-2 124M)'\nset xlabel "
                         "'schema (tests/constrain/schemas.json)'\nset ylabel 'tokens per "
                         "forward'\nplot '"
                      << csv.string()
                      << "' every ::1 using 1:4 with boxes lc rgb '#1f77b4' notitle, 1 with "
                         "lines dt 2 lc rgb '#555555' title 'a step per token'\n";
    if (std::system(("gnuplot '" + gp.string() + "' 2>/dev/null").c_str()) != 0)
      std::fprintf(stderr, "(gnuplot failed or missing: no PNG)\n");
    std::printf("\nCSV and PNG in %s\n", out.c_str());
    return equal == static_cast<int>(rs.size()) ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_jump_forward: error: %s\n", e.what());
    return 2;
  }
}
