// SPDX-License-Identifier: Apache-2.0
// Lesson 6's measurement: one decode step of GPT-2 small dims against the batch size, every
// row on a different random adapter (ranks 4..16, all four linears adapted), for each LoRA
// dispatch policy beside the base model without LoRA (the ceiling) in the same run:
//   loop       one masked pass over the batch per distinct adapter (the course's loop)
//   gathered   each row its own A and B (BGMV)
//   segmented  rows grouped by adapter, shrink then expand per group (SGMV)
// Writes lora_step.csv and lora_step.png into --out. Host backend, f32, random weights.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common.hpp"
#include "servekit/lora/adapter.hpp"
#include "servekit/lora/random_adapter.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/model/random_gpt2.hpp"

namespace fs = std::filesystem;
namespace sk = servekit;
using D = sk::dims::Gpt2Small;
template <class L>
using Model = sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Contiguous, L>>;
constexpr int kContext = 32;  // tokens already in each row's cache when the step is timed

sk::lora::Adapter random_adapter(int i, std::mt19937_64& rng) {
  const int rank = 4 + static_cast<int>(rng() % 13);
  return sk::lora::random_adapter<D>(
      {.name = "random" + std::to_string(i), .rank = rank, .alpha = 2.f * rank}, rng);
}

// Median seconds of one decode step for B rows, row i on adapter i (or none).
template <class M>
double step_seconds(M& m, int B, bool adapters, int reps) {
  auto cache = m.make_cache(B, kContext + reps + 1);
  std::vector<int32_t> tokens, ad;
  std::vector<sk::model::SeqStep> seqs;
  std::mt19937 rng(B);
  for (int i = 0; i < B; i++) {
    seqs.push_back({i, 0, kContext});
    for (int t = 0; t < kContext; t++) tokens.push_back(static_cast<int32_t>(rng() % 50000));
    ad.push_back(adapters ? i : -1);
  }
  std::vector<float> logits;
  m.forward(cache, {tokens, seqs, sk::model::Logits::Last, ad}, logits);  // prefill, untimed
  std::vector<double> t;
  for (int r = 0; r < reps; r++) {
    tokens.assign(B, 0);
    for (int i = 0; i < B; i++) seqs[i] = {i, kContext + r, 1}, tokens[i] = 42 + i;
    const double t0 = sk::bench::now_s();
    m.forward(cache, {tokens, seqs, sk::model::Logits::Last, ad}, logits);
    t.push_back(sk::bench::now_s() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main(int argc, char** argv) {
  CLI::App app{"bench_lora: decode step latency vs batch, each row on its own adapter"};
  std::string out = "out/bench_lora";
  std::vector<int> batches = {1, 2, 4, 8, 16, 32, 64};
  int reps = 3;
  app.add_option("--out", out, "folder for lora_step.csv and lora_step.png");
  app.add_option("--batches", batches, "batch sizes")->delimiter(',');
  app.add_option("--reps", reps, "timed steps per point (the median is kept)")
      ->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  fs::create_directories(out);
  const int n_ad = *std::max_element(batches.begin(), batches.end());

  std::fprintf(stderr, "building GPT-2 small (random weights) and %d random adapters...\n", n_ad);
  auto tensors = sk::model::random_gpt2<D>(1);
  std::mt19937_64 rng(7);
  std::vector<sk::lora::Adapter> adapters;
  for (int i = 0; i < n_ad; i++) adapters.push_back(random_adapter(i, rng));
  Model<sk::lora::None> none(tensors);
  Model<sk::lora::Loop> loop(tensors);
  Model<sk::lora::Gathered> gathered(tensors);
  Model<sk::lora::Segmented> segmented(std::move(tensors));
  for (const auto& a : adapters) loop.add_adapter(a), gathered.add_adapter(a);
  for (auto& a : adapters) segmented.add_adapter(std::move(a));

  std::printf("one decode step, %d cached tokens per row, row i on adapter i (ranks 4..16)\n",
              kContext);
  // What a step must read: the base weights once, plus each row's own adapter.
  std::size_t ad_bytes = 0;
  for (int i = 0; i < n_ad; i++) ad_bytes += gathered.adapter(i)->bytes();
  std::printf(
      "base weights %.0f MB; the %d adapters %.0f MB (%.0f MB each on average): at batch "
      "%d a step reads %.2fx the base model's bytes\n",
      none.weight_bytes() / 1e6, n_ad, ad_bytes / 1e6, ad_bytes / 1e6 / n_ad, n_ad,
      double(none.weight_bytes() + ad_bytes) / none.weight_bytes());
  std::printf("%6s %12s %12s %12s %12s   %s\n", "batch", "none ms", "loop ms", "gathered ms",
              "segmented ms", "vs none: loop / gathered / segmented");
  std::ofstream csv(fs::path(out) / "lora_step.csv");
  csv << "batch,none_ms,loop_ms,gathered_ms,segmented_ms\n";
  for (int B : batches) {
    std::fprintf(stderr, "  batch %d...\r", B);
    const double tn = step_seconds(none, B, false, reps) * 1e3;
    const double tl = step_seconds(loop, B, true, reps) * 1e3;
    const double tg = step_seconds(gathered, B, true, reps) * 1e3;
    const double ts = step_seconds(segmented, B, true, reps) * 1e3;
    std::printf("%6d %12.2f %12.2f %12.2f %12.2f   %.2fx / %.2fx / %.2fx\n", B, tn, tl, tg, ts,
                tl / tn, tg / tn, ts / tn);
    std::fflush(stdout);
    csv << B << ',' << tn << ',' << tl << ',' << tg << ',' << ts << '\n';
  }
  csv.close();
  const std::string c = (fs::path(out) / "lora_step.csv").string();
  const fs::path gp = fs::path(out) / "lora_step.gp";
  std::ofstream(gp) << "set terminal pngcairo size 800,480\nset output '"
                    << (fs::path(out) / "lora_step.png").string()
                    << "'\nset datafile separator ','\nset key top left\nset logscale x 2\n"
                       "set xlabel 'batch size (each row on its own adapter)'\n"
                       "set ylabel 'decode step (ms)'\nset grid\n"
                       "set title 'GPT-2 small, host f32: LoRA dispatch vs no LoRA'\n"
                       "plot '"
                    << c
                    << "' using 1:2 skip 1 with linespoints lw 2 title 'no LoRA', '' using 1:3 "
                       "skip 1 with linespoints lw 2 title 'loop', '' using 1:4 skip 1 with "
                       "linespoints lw 2 title 'gathered (BGMV)', '' using 1:5 skip 1 with "
                       "linespoints lw 2 title 'segmented (SGMV)'\n";
  if (std::system(("gnuplot '" + gp.string() + "' 2>/dev/null").c_str()) != 0)
    std::fprintf(stderr, "(gnuplot failed or missing: no PNG)\n");
  std::printf("wrote %s and lora_step.png\n", c.c_str());
}
