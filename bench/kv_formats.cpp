// SPDX-License-Identifier: Apache-2.0
// Decode steps over a long context with the KV cache in fp32, f16 and int8 (kv::ContiguousI8: a
// scale per token and head), and in fp32 blocks of 16 rows (kv::Paged<16>: the same bytes behind a
// block table), GPT-2 124M with fp32 weights (random), host backend: at batch B a
// step reads every weight once and every sequence's cached keys and values once, so at large
// batches and long contexts the cache is most of the step's bytes. Per batch size and cache:
// the step's median time, the bytes it must read (weights + K and V of every sequence), and
// those bytes over the read bandwidth measured in the same run (the step's floor); and a prompt
// chunk's step, the last 256 rows of every context computed again (attention over up to all
// of the context: a paged layout's lookups cost most there). Writes
// kv_formats.csv and kv_formats.png into --out.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common.hpp"
#include "servekit/model/gpt2.hpp"

namespace fs = std::filesystem;
namespace sk = servekit;
using D = sk::dims::Gpt2Small;
using servekit::bench::now_s;
using servekit::bench::percentile;

struct Args {
  std::vector<int> batches = {1, 8, 32};
  int context = 512, reps = 9, chunk_reps = 3;
  std::string out = "out/bench_kv_formats";
};

struct Figure {
  std::string cache;
  int batch;
  double ms, bytes, floor_ms, chunk_ms;
};

// One cache kind over `batch` sequences with `context` tokens cached each, ready to step.
struct Setup {
  std::string cache;
  double bytes;                   // the step's reads: weights + every sequence's K and V
  std::function<double()> step;   // seconds of one decode step (the same row rewritten)
  std::function<double()> chunk;  // seconds of one prompt chunk's step (the same rows rewritten)
};

template <class Kv>
Setup setup(const sk::model::Gpt2Tensors& t, int batch, const Args& a) {
  using Model = sk::Gpt2<sk::Config<D, sk::weights::F32, Kv>>;
  auto m = std::make_shared<Model>(t);
  auto cache = std::make_shared<typename Model::Cache>(m->make_cache(batch, a.context + 2));
  std::mt19937_64 rng(3);
  for (int done = 0; done < a.context; done += 256) {  // the contexts, 256 tokens a step
    const int n = std::min(256, a.context - done);
    std::vector<sk::model::SeqStep> seqs;
    std::vector<int32_t> tokens;
    for (int s = 0; s < batch; s++) {
      seqs.push_back({s, done, n});
      for (int i = 0; i < n; i++) tokens.push_back(static_cast<int32_t>(rng() % 50000));
    }
    std::vector<float> logits;
    m->forward(*cache, {tokens, seqs}, logits);
  }
  const double bytes = static_cast<double>(m->weight_bytes()) +
                       static_cast<double>(cache->bytes_per_token()) * batch * (a.context + 1);
  // A step of n tokens of every sequence from row `from` on.
  auto timed = [m, cache, batch](int from, int n) {
    std::vector<sk::model::SeqStep> seqs;
    for (int s = 0; s < batch; s++) seqs.push_back({s, from, n});
    const std::vector<int32_t> tokens(static_cast<std::size_t>(batch) * n, 464);
    static std::vector<float> logits;
    const double t0 = now_s();
    m->forward(*cache, {tokens, seqs}, logits);
    return now_s() - t0;
  };
  const int n = std::min(256, a.context);
  return {std::string(Kv::name), bytes, [timed, ctx = a.context] { return timed(ctx, 1); },
          [timed, ctx = a.context, n] { return timed(ctx - n, n); }};
}

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"servekit KV-cache formats at decode"};
  app.add_option("--batches", a.batches, "batch sizes")->delimiter(',')->check(CLI::Range(1, 128));
  app.add_option("--context", a.context, "tokens cached per sequence")->check(CLI::Range(1, 1000));
  app.add_option("--reps", a.reps, "timed steps per point")->check(CLI::Range(1, 100));
  app.add_option("--chunk-reps", a.chunk_reps, "timed prompt chunks per point (0: none)")
      ->check(CLI::Range(0, 100));
  app.add_option("--out", a.out, "folder for the CSV and the PNG");
  CLI11_PARSE(app, argc, argv);
  try {
    fs::create_directories(a.out);
    const double gbs = servekit::bench::read_bandwidth_gbs();
    std::printf(
        "GPT-2 124M, fp32 weights, host (%s), %d tokens cached per sequence; read "
        "bandwidth %.1f GB/s (measured, this run)\n",
        sk::kernels::host::kIsa, a.context, gbs);
    std::printf("%6s %16s %10s %12s %10s %9s %9s %10s %9s\n", "batch", "cache", "step ms",
                "MB read", "floor ms", "of floor", "vs f32", "chunk ms", "vs f32");
    const auto t = sk::model::random_gpt2<D>(0);
    std::vector<Figure> all;
    for (int b : a.batches) {
      std::fprintf(stderr, "\r  batch %d ...  ", b);
      std::vector<Setup> kinds = {
          setup<sk::kv::Contiguous>(t, b, a), setup<sk::kv::ContiguousF16>(t, b, a),
          setup<sk::kv::ContiguousI8>(t, b, a), setup<sk::kv::Paged<16>>(t, b, a)};
      // The kinds take turns, step by step, so that a slower moment falls on all of them; one
      // untimed round first.
      std::vector<std::vector<double>> ms(kinds.size()), chunk_ms(kinds.size());
      for (int r = 0; r <= a.reps; r++)
        for (std::size_t k = 0; k < kinds.size(); k++) {
          const double s = kinds[k].step();
          if (r > 0) ms[k].push_back(1e3 * s);
        }
      for (int r = 0; r < a.chunk_reps; r++)
        for (std::size_t k = 0; k < kinds.size(); k++) {
          std::fprintf(stderr, "\r  batch %d: prompt chunk %d/%d ...  ", b, r + 1, a.chunk_reps);
          chunk_ms[k].push_back(1e3 * kinds[k].chunk());
        }
      std::fprintf(stderr, "\r%40s\r", "");
      const double f32_ms = percentile(ms[0], 50);
      const double f32_chunk = a.chunk_reps ? percentile(chunk_ms[0], 50) : 0;
      for (std::size_t k = 0; k < kinds.size(); k++) {
        const double chunk = a.chunk_reps ? percentile(chunk_ms[k], 50) : 0;
        const Figure f{kinds[k].cache,
                       b,
                       percentile(ms[k], 50),
                       kinds[k].bytes,
                       kinds[k].bytes / (gbs * 1e9) * 1e3,
                       chunk};
        std::printf("%6d %16s %10.2f %12.1f %10.2f %8.0f%% %8.2fx %10.1f %8.2fx\n", f.batch,
                    f.cache.c_str(), f.ms, f.bytes / 1e6, f.floor_ms, 100 * f.floor_ms / f.ms,
                    f32_ms / f.ms, f.chunk_ms, chunk > 0 ? f32_chunk / chunk : 0.0);
        all.push_back(f);
      }
      std::fflush(stdout);
    }
    const fs::path csv = fs::path(a.out) / "kv_formats.csv";
    std::ofstream f(csv);
    f << "batch,cache,step_ms,mb_read,floor_ms,chunk_ms\n";
    for (const Figure& x : all)
      f << x.batch << ',' << x.cache << ',' << x.ms << ',' << x.bytes / 1e6 << ',' << x.floor_ms
        << ',' << x.chunk_ms << '\n';
    f.close();
    std::string s = "set datafile separator ','\nset terminal pngcairo size 800,480\nset output '" +
                    (fs::path(a.out) / "kv_formats.png").string() +
                    "'\nset title 'decode step, GPT-2 124M, " + std::to_string(a.context) +
                    " tokens cached per sequence'\nset xlabel 'batch'\nset ylabel 'ms per "
                    "step'\nset logscale x 2\nset key left top\nset grid\nplot ";
    const char* names[] = {"contiguous", "contiguous-f16", "contiguous-i8", "paged16"};
    for (int i = 0; i < 4; i++)
      s += "'" + csv.string() + "' using 1:(strcol(2) eq '" + names[i] +
           "' ? $3 : 1/0) with linespoints lw 2 lc " + std::to_string(i + 1) + " title '" +
           names[i] + "', '' using 1:(strcol(2) eq '" + names[i] +
           "' ? $5 : 1/0) with lines dt 2 lc " + std::to_string(i + 1) + " title '" + names[i] +
           " floor'" + (i < 3 ? ", " : "\n");
    servekit::bench::plot(fs::path(a.out) / "kv_formats.gp", s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kv_formats: error: %s\n", e.what());
    return 1;
  }
}
