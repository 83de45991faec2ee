// SPDX-License-Identifier: Apache-2.0
// Lesson 3: continuous batching.
//
// A static batch runs until its longest request ends: a request that wanted 10 tokens keeps
// its row (and the batch's other rows wait for the next batch) while one request of the batch
// generates 100. Continuous batching decides per step: a finished request leaves at once and
// a waiting one takes its place in the very next forward pass, prefilled beside the running
// decodes. This example, like the course:
//   1. runs the course's workload, 32 requests in batches of 8 where every 8th wants 100
//      tokens and the others 10, through the static and the continuous scheduler of the same
//      engine, with a progress bar, and prints time, throughput and steps of each beside the
//      step-count bound (static: 4 batches x 100 steps; continuous: about a quarter of that);
//   2. writes continuous_batching.csv and .png: each request's end-to-end latency under both;
//   3. streams three concurrent requests (100, 10 and 10 tokens) through the continuous engine,
//      interleaved as the tokens come, one colour each, with each one's TTFT and tokens/s.
// Look at: the ratio in (1), and in (2) how the short requests of later batches finish early
// under continuous batching instead of waiting for the long ones.
// With --model DIR it uses a Hugging Face GPT-2; without, a seeded random GPT-2 124M (same
// cost, meaningless text).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <unistd.h>

#include "common/plot.hpp"
#include "common/run.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/engine.hpp"

namespace fs = std::filesystem;
namespace sk = servekit;
namespace serve = servekit::serve;

struct Args {
  std::string model, vocab, out = "out/03_continuous_batching";
  int requests = 32, batch = 8, long_tokens = 100, short_tokens = 10;
};

const std::vector<std::string> kPrompts = {"The quick brown fox jumped over the",
                                           "The rain in Spain falls", "What comes up must"};

struct Run {
  std::vector<serve::Result> results;
  double seconds;
  serve::EngineStats stats;
};

template <class Sched, class Model>
Run run_workload(Model& model, const sk::text::Gpt2Tokenizer& tok, const Args& a,
                 const std::vector<serve::Request>& reqs) {
  serve::Engine<Model, Sched> engine(model, tok, {.max_batch = a.batch});
  const auto t0 = std::chrono::steady_clock::now();
  auto results = engine.run_all(reqs, [&](int done, int total) {
    const int w = 32, fill = done * w / total;
    std::fprintf(stderr, "\r  %-10s [%s%s] %d/%d", std::string(Sched::name).c_str(),
                 std::string(fill, '#').c_str(), std::string(w - fill, '.').c_str(), done, total);
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "\n");
  return {std::move(results), s, engine.stats()};
}

template <class Model>
int lesson(const Args& a, const sk::text::Gpt2Tokenizer& tok, Model& model) {
  constexpr int V = Model::Dims::vocab;
  std::printf("composition: %s\n", Model::name().c_str());
  auto ids_of = [&](const std::string& p) {
    auto ids = tok.encode(p);
    for (auto& t : ids) t %= V;  // test-sized models have a smaller vocabulary
    return ids;
  };

  // 1. The course's workload through both schedulers.
  std::vector<serve::Request> reqs(a.requests);
  long wanted = 0;
  for (int i = 0; i < a.requests; i++) {
    reqs[i].prompt_ids = ids_of(kPrompts[i % kPrompts.size()]);
    reqs[i].stop.max_new_tokens = i % a.batch == 0 ? a.long_tokens : a.short_tokens;
    reqs[i].stop.stop_at_eos = false;  // every request runs to its length, as in the course
    wanted += reqs[i].stop.max_new_tokens;
  }
  std::printf("\n%d requests, batch %d: every %dth wants %d tokens, the others %d (%ld in all)\n",
              a.requests, a.batch, a.batch, a.long_tokens, a.short_tokens, wanted);
  Run st = run_workload<serve::sched::Static>(model, tok, a, reqs);
  Run ct = run_workload<serve::sched::Continuous>(model, tok, a, reqs);
  for (int i = 0; i < a.requests; i++)
    if (st.results[i].ids() != ct.results[i].ids())
      std::printf("  note: request %d got other tokens under the two schedulers\n", i);
  const int batches = (a.requests + a.batch - 1) / a.batch;
  std::printf("\n%-11s %9s %12s %7s %18s\n", "scheduler", "time (s)", "tokens/s", "steps",
              "mean latency (s)");
  for (auto* r : {&st, &ct}) {
    double lat = 0;
    for (auto& x : r->results) lat += x.metrics.e2e_ms / 1e3;
    std::printf("%-11s %9.2f %12.1f %7ld %18.2f\n", r == &st ? "static" : "continuous", r->seconds,
                wanted / r->seconds, r->stats.steps, lat / a.requests);
  }
  std::printf("step-count bound: static %d batches x %d steps = %d; continuous >= %ld / %d = %ld\n",
              batches, a.long_tokens, batches * a.long_tokens, wanted, a.batch,
              (wanted + a.batch - 1) / a.batch);
  std::printf("continuous / static throughput: %.2fx\n", st.seconds / ct.seconds);

  // 2. Per-request latency, CSV + plot.
  fs::create_directories(a.out);
  const fs::path csv = fs::path(a.out) / "continuous_batching.csv";
  std::ofstream f(csv);
  f << "request,max_new_tokens,static_e2e_s,continuous_e2e_s,static_ttft_s,continuous_ttft_s\n";
  for (int i = 0; i < a.requests; i++)
    f << i << ',' << reqs[i].stop.max_new_tokens << ',' << st.results[i].metrics.e2e_ms / 1e3 << ','
      << ct.results[i].metrics.e2e_ms / 1e3 << ',' << st.results[i].metrics.ttft_ms / 1e3 << ','
      << ct.results[i].metrics.ttft_ms / 1e3 << '\n';
  f.close();
  const fs::path png = fs::path(a.out) / "continuous_batching.png";
  sk::examples::gnuplot(
      fs::path(a.out) / "continuous_batching.gp",
      "set terminal pngcairo size 900,500\nset output '" + png.string() +
          "'\nset datafile separator ','\nset key top left\nset grid\nset style data histogram\n"
          "set style histogram clustered gap 1\nset style fill solid 0.8\n"
          "set title 'End-to-end latency per request (" +
          Model::name() + ")'\nset xlabel 'request (every " + std::to_string(a.batch) +
          "th wants " + std::to_string(a.long_tokens) +
          " tokens)'\nset ylabel 'seconds'\nset xtics 4\n"
          "plot '" +
          csv.string() +
          "' every ::1 using 3 lc rgb '#d62728' title 'static', '' every ::1 using 4 lc rgb "
          "'#1f77b4' title 'continuous'\n");
  std::printf("wrote %s and %s\n", csv.c_str(), png.c_str());

  // 3. Three concurrent streams, interleaved as their tokens come.
  std::printf("\nthree concurrent requests (%d, %d, %d tokens), streamed:\n", a.long_tokens,
              a.short_tokens, a.short_tokens);
  const bool color = isatty(fileno(stdout));
  const char* colours[3] = {"\033[31m", "\033[32m", "\033[34m"};
  serve::Engine<Model, serve::sched::Continuous> engine(model, tok, {.max_batch = a.batch});
  std::mutex mu;
  std::vector<serve::RequestHandle> hs;
  for (int i = 0; i < 3; i++) {
    serve::Request r;
    r.prompt_ids = ids_of(kPrompts[i]);
    r.stop.max_new_tokens = i == 0 ? a.long_tokens : a.short_tokens;
    r.stop.stop_at_eos = false;
    r.on_piece = [&, i](std::string_view piece, const serve::GeneratedToken&) {
      std::lock_guard lk(mu);
      if (color)
        std::printf("%s%.*s\033[0m", colours[i], static_cast<int>(piece.size()), piece.data());
      else
        std::printf("[%d]%.*s", i, static_cast<int>(piece.size()), piece.data());
      std::fflush(stdout);
      return true;
    };
    hs.push_back(engine.submit(std::move(r)));
  }
  std::vector<serve::Result> rs;
  for (auto& h : hs) rs.push_back(h.get());
  std::printf("\n");
  for (int i = 0; i < 3; i++) {
    const auto& m = rs[i].metrics;
    const double tps =
        m.e2e_ms > m.ttft_ms ? (m.generated_tokens - 1) / ((m.e2e_ms - m.ttft_ms) / 1e3) : 0.0;
    std::printf("  %s request %d%s: %d tokens, TTFT %.1f ms, %.1f tokens/s after it\n",
                color ? colours[i] : "", i, color ? "\033[0m" : "", m.generated_tokens, m.ttft_ms,
                tps);
  }
  return 0;
}

int main(int argc, char** argv) {
  CLI::App app{"Lesson 3: continuous batching"};
  Args a;
  sk::examples::add_model_options(app, a.model, a.vocab);
  app.add_option("--requests", a.requests, "requests in the workload")->check(CLI::Range(1, 4096));
  app.add_option("--batch", a.batch, "batch size (static) and running sequences (continuous)")
      ->check(CLI::Range(1, 256));
  app.add_option("--long-tokens", a.long_tokens, "tokens of every batch-th request")
      ->check(CLI::Range(1, 900));
  app.add_option("--short-tokens", a.short_tokens, "tokens of the others")
      ->check(CLI::Range(1, 900));
  app.add_option("--out", a.out, "folder for the CSV and the plot");
  CLI11_PARSE(app, argc, argv);
  return sk::examples::run_lesson(
      "03_continuous_batching", a.model, a.vocab,
      [&]<class D>(std::type_identity<D>, const sk::text::Gpt2Tokenizer& tok) {
        using Model = sk::Gpt2<sk::Config<D>>;
        std::printf("loading %s ...\n",
                    a.model.empty() ? "random GPT-2 124M (seed 0)" : a.model.c_str());
        auto model = a.model.empty() ? Model::random(0) : Model::load(a.model);
        return lesson(a, tok, model);
      });
}
