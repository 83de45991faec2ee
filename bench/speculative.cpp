// SPDX-License-Identifier: Apache-2.0
// Speculative decoding (n-gram prompt lookup) against plain decoding, in one run:
//   steps   what a step costs the model: a plain decode step (one row per sequence) and a
//           verify step (k + 1 rows per sequence) at each batch size, medians of --reps;
//   engine  decode tokens/s without and with speculation (k = --k; proposing always, and under
//           the engine's cost rule), rounds alternating, for requests whose prompts repeat a
//           motif, at several temperatures: greedy loops are accepted almost always, hotter
//           sampling less. Each point: the measured acceptance rate and speedup, beside the
//           speedup predicted from the measured step costs.
// The prediction: a proposal of k tokens, each accepted with probability a while the ones
// before it were, yields E = (1 - a^(k+1)) / (1 - a) tokens per verify step, so
// speedup(a) = E * t(decode) / t(verify k). Random weights make acceptance artificial (a random
// model falls into loops that real text rarely has): read the curve, not the points, for what a
// real model would gain at its own acceptance rate. Writes steps.csv, engine.csv and
// speedup.png (the curve per batch size and the measured points) into --out. Host backend, f32,
// contiguous KV; a seeded random GPT-2 124M (random weights cost what real ones do).
// bench/speculative_cuda.cu compiles the same on the Cuda backend with f16 weights, where a
// verify step's k + 1 rows cost little more than one (the decode linears read their weights
// once for up to 8 rows).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common.hpp"
#include "speculation_runs.hpp"
#if defined(__CUDACC__)
#include "servekit/backend/cuda.hpp"
#include "servekit/backend/cuda_device.hpp"
#endif
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/engine.hpp"

namespace fs = std::filesystem;
namespace sk = servekit;
namespace serve = servekit::serve;
using D = sk::dims::Gpt2Small;
#if defined(__CUDACC__)
using Model = sk::Gpt2<
    sk::Config<D, sk::weights::F16, sk::kv::Contiguous, sk::lora::None, sk::backend::Cuda>>;
#else
using Model = sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Contiguous>>;
#endif
using servekit::bench::expected_tokens;
using servekit::bench::Measured;
using servekit::bench::motif_requests;
using servekit::bench::now_s;
using servekit::bench::plot;
using servekit::bench::run_engine;

struct Args {
  std::string vocab = sk::text::default_vocab_dir().string(), out = "out/bench_speculative",
              parts = "steps,engine";
  std::vector<int> batches = {1, 4, 16};
  std::vector<float> temperatures = {0.f, 0.5f, 0.8f, 1.2f};
  int k = 4, prompt = 128, new_tokens = 128, rounds = 2, reps = 9;
};

// Seconds of one step in which each of `batch` sequences (n_past = prompt) feeds `rows` tokens
// and gets their logits (on a device: a greedy pick per row, as the engine's verify does).
// (A template, so that the branch the backend lacks is discarded.)
template <class M>
double step_s(M& m, typename M::Cache& cache, int batch, int rows, int prompt) {
  std::vector<sk::model::SeqStep> seqs;
  for (int i = 0; i < batch; i++) seqs.push_back({i, prompt, rows, 0, rows});
  std::vector<int32_t> tokens(static_cast<std::size_t>(batch) * rows, 464);
  static std::vector<float> logits;
  const std::size_t n = tokens.size();
  static std::vector<sk::RowSampling> samp;
  static std::vector<int32_t> ids;
  static std::vector<float> lp;
  samp.resize(n), ids.resize(n), lp.resize(n);
  const double t0 = now_s();
  if constexpr (M::kDeviceSampling)
    m.forward_pick(cache, {tokens, seqs}, samp, ids, lp);
  else
    m.forward(cache, {tokens, seqs}, logits);
  return now_s() - t0;
}

struct StepCosts {
  int batch;
  double decode_ms;
  std::vector<double> verify_ms;  // [k]: k proposed tokens per sequence, k = 1..K
};

std::vector<StepCosts> steps(Model& m, const Args& a) {
  std::printf("\n== step costs: %d-token contexts, median of %d (ms)\n", a.prompt, a.reps);
  std::printf("%6s %10s", "batch", "decode");
  for (int k = 1; k <= a.k; k++) std::printf("  verify k=%d", k);
  std::printf("\n");
  const int B = *std::max_element(a.batches.begin(), a.batches.end());
  auto cache = m.make_cache(B);
  {  // every slot's prompt in its rows
    std::vector<sk::model::SeqStep> seqs;
    for (int i = 0; i < B; i++) seqs.push_back({i, 0, a.prompt, 0, 1});
    std::vector<int32_t> tokens(static_cast<std::size_t>(B) * a.prompt);
    std::mt19937_64 rng(1);
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % 50000);
    std::vector<float> logits;
    m.forward(cache, {tokens, seqs}, logits);
  }
  std::ofstream f(fs::path(a.out) / "steps.csv");
  f << "batch,decode_ms";
  for (int k = 1; k <= a.k; k++) f << ",verify_k" << k << "_ms";
  f << "\n";
  std::vector<StepCosts> out;
  for (int b : a.batches) {
    // The shapes take turns, rep by rep, so that a slower moment of the machine falls on all of
    // them; one untimed round first grows the buffers.
    std::vector<std::vector<double>> t(a.k + 1);
    for (int r = 0; r <= a.reps; r++)
      for (int k = 0; k <= a.k; k++) {
        const double s = step_s(m, cache, b, k + 1, a.prompt);
        if (r > 0) t[k].push_back(1e3 * s);
      }
    StepCosts c{b, servekit::bench::percentile(t[0], 50), {0}};
    for (int k = 1; k <= a.k; k++) c.verify_ms.push_back(servekit::bench::percentile(t[k], 50));
    std::printf("%6d %10.2f", b, c.decode_ms);
    f << b << "," << c.decode_ms;
    for (int k = 1; k <= a.k; k++) {
      std::printf("  %7.2f (%.2fx)", c.verify_ms[k], c.verify_ms[k] / c.decode_ms);
      f << "," << c.verify_ms[k];
    }
    std::printf("\n");
    f << "\n";
    std::fflush(stdout);
    out.push_back(c);
  }
  return out;
}

// The speedup over plain decode steps when each of k proposals is accepted with probability a.
double predicted(const StepCosts& c, double a, int k) {
  return expected_tokens(a, k) * c.decode_ms / c.verify_ms[k];
}

// Three ways, rounds alternating: plain; n-gram proposing whenever its pace allows (rule
// "always"); n-gram under the cost rule, which proposes only where the engine's measured step
// cost says the rows pay (serve/step_cost.hpp): it should track the better of the other two.
void engine(Model& m, const sk::text::Gpt2Tokenizer& tok, const Args& a,
            const std::vector<StepCosts>& costs) {
  std::printf(
      "\n== engine: %d-token prompts (a motif repeated), %d new tokens, k = %d, %d rounds "
      "(tokens/s; ngram: rule always, cost: the cost rule)\n",
      a.prompt, a.new_tokens, a.k, a.rounds);
  std::printf("%6s %6s %10s %10s %9s %11s %11s %10s %9s %10s\n", "batch", "temp", "plain", "ngram",
              "accept", "speedup", "predicted", "cost", "speedup", "declined");
  std::ofstream f(fs::path(a.out) / "engine.csv");
  f << "batch,temperature,plain_tok_s,ngram_tok_s,acceptance,speedup,predicted,cost_tok_s,"
       "cost_speedup,cost_acceptance,cost_declined_share\n";
  const serve::SpecRule always = serve::SpecRule::always, cost = serve::SpecRule::cost;
  for (const StepCosts& c : costs)
    for (float T : a.temperatures) {
      const auto rs = motif_requests(a.prompt, a.new_tokens, c.batch, T);
      Measured sum[3];  // plain, always, cost
      for (int r = 0; r < a.rounds; r++) {
        // Rotate which goes first, so that none always finds the machine warmer.
        for (int i = 0; i < 3; i++) {
          const int way = (r + i) % 3;
          sum[way].add(
              run_engine(m, tok, rs, {.k = way == 0 ? 0 : a.k, .rule = way == 2 ? cost : always}));
          std::fprintf(stderr, "\r  batch %d T %.1f round %d/%d %s  ", c.batch, T, r + 1, a.rounds,
                       way == 0   ? "plain"
                       : way == 1 ? "ngram"
                                  : "cost");
        }
      }
      std::fprintf(stderr, "\r%60s\r", "");
      const double plain = sum[0].rate(), spec = sum[1].rate(), ruled = sum[2].rate();
      const double acc = sum[1].acceptance(), pred = predicted(c, acc, a.k);
      // Of the times a sequence could have proposed, the share the rule said no to.
      const long asked = sum[2].declined + sum[2].verifies;
      const double declined = asked > 0 ? double(sum[2].declined) / asked : 0;
      std::printf("%6d %6.1f %10.1f %10.1f %9.2f %10.2fx %10.2fx %10.1f %8.2fx %9.0f%%\n", c.batch,
                  T, plain, spec, acc, spec / plain, pred, ruled, ruled / plain, 100 * declined);
      std::fflush(stdout);
      f << c.batch << "," << T << "," << plain << "," << spec << "," << acc << "," << spec / plain
        << "," << pred << "," << ruled << "," << ruled / plain << "," << sum[2].acceptance() << ","
        << declined << "\n";
    }
}

// The predicted speedup against acceptance per batch size (lines), and the measured points.
void draw(const Args& a, const std::vector<StepCosts>& costs, bool measured) {
  const fs::path curve = fs::path(a.out) / "predicted.csv";
  std::ofstream f(curve);
  f << "acceptance";
  for (const auto& c : costs) f << ",batch" << c.batch;
  f << "\n";
  for (int i = 0; i <= 100; i++) {
    const double acc = i / 100.0;
    f << acc;
    for (const auto& c : costs) f << "," << predicted(c, acc, a.k);
    f << "\n";
  }
  f.close();
  std::string s = "set datafile separator ','\nset terminal pngcairo size 900,560\nset output '" +
                  (fs::path(a.out) / "speedup.png").string() +
                  "'\nset title 'n-gram speculation, k = " + std::to_string(a.k) +
                  ": speedup over plain decoding'\nset xlabel 'acceptance rate'\nset ylabel "
                  "'decode speedup (x)'\nset key left top\nset grid\nset yrange [0:*]\nplot ";
  for (std::size_t i = 0; i < costs.size(); i++)
    s += "'" + curve.string() + "' using 1:" + std::to_string(i + 2) + " with lines lw 2 lc " +
         std::to_string(i + 1) + " title 'predicted, batch " + std::to_string(costs[i].batch) +
         "', ";
  if (measured)
    for (std::size_t i = 0; i < costs.size(); i++)
      s += "'" + (fs::path(a.out) / "engine.csv").string() +
           "' using ($1 == " + std::to_string(costs[i].batch) +
           " ? $5 : 1/0):6 with points pt 7 ps 1.5 lc " + std::to_string(i + 1) +
           " title 'measured, batch " + std::to_string(costs[i].batch) + "', ";
  s += "1 with lines dt 2 lc 'gray' title 'plain'\n";
  plot(fs::path(a.out) / "speedup.gp", s);
}

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"servekit speculative decoding benchmark"};
  app.add_option("--vocab", a.vocab, "GPT-2 vocabulary folder");
  app.add_option("--out", a.out, "folder for the CSVs and the PNG");
  app.add_option("--parts", a.parts, "comma-separated: steps,engine");
  app.add_option("--batches", a.batches, "batch sizes")->delimiter(',')->check(CLI::Range(1, 64));
  app.add_option("--temperatures", a.temperatures, "engine: sampling temperatures (0: greedy)")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 4.0));
  app.add_option("--k", a.k, "proposed tokens per step")->check(CLI::Range(1, 16));
  app.add_option("--prompt", a.prompt, "prompt tokens")->check(CLI::Range(8, 768));
  app.add_option("--new", a.new_tokens, "new tokens")->check(CLI::Range(1, 256));
  app.add_option("--rounds", a.rounds, "engine: rounds (plain, ngram and cost each, in turn)")
      ->check(CLI::Range(1, 100));
  app.add_option("--reps", a.reps, "steps: repetitions per step shape")->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);
  try {
#if defined(__CUDACC__)
    if (const std::string why = sk::backend::cuda_device_missing(); !why.empty()) {
      std::fprintf(stderr, "bench_speculative_cuda: no CUDA device (%s); nothing run\n",
                   why.c_str());
      return sk::backend::kNoCudaDeviceExit;
    }
    std::printf("device: %s\n", sk::backend::cuda_device_summary().c_str());
#endif
    fs::create_directories(a.out);
    auto has = [&](const char* p) {
      return ("," + a.parts + ",").find(std::string(",") + p + ",") != std::string::npos;
    };
    auto tok = sk::text::Gpt2Tokenizer::from_dir(a.vocab);
    std::fprintf(stderr, "bench_speculative: random GPT-2 124M (seed 0), %s\n",
                 Model::name().c_str());
    auto m = Model::random(0);
    const auto costs = steps(m, a);
    if (has("engine")) engine(m, tok, a, costs);
    draw(a, costs, has("engine"));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_speculative: error: %s\n", e.what());
    return 1;
  }
}
