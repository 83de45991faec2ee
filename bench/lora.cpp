// SPDX-License-Identifier: Apache-2.0
// Lesson 6's measurement: one decode step of GPT-2 small dims against the batch size, for each
// LoRA dispatch policy beside the base model without LoRA and the floor, in the same run:
//   loop       one masked pass over the batch per distinct adapter (the course's loop)
//   gathered   each row its own A and B (BGMV)
//   segmented  rows grouped by adapter, shrink then expand per group (SGMV)
//   floor      the base step plus the step's distinct adapters' bytes at the read bandwidth
//              measured here (their FLOPs are a few percent of the base step's: bytes bound)
// --shares says how the rows share adapters: 0, every row its own (row i on adapter i); k, k
// adapters shared by the rows in turn (row i on adapter i % k), e.g. 8 groups or 1 for all.
// Random adapters of ranks 4..16 on all four linears. Writes lora_step.csv and lora_step.png
// (each policy's step over the base step's, per sharing) into --out. Host backend, f32, random
// weights.
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

// Median seconds of one decode step for B rows, row i on adapter i % k (k 0: i; adapters
// false: none).
template <class M>
double step_seconds(M& m, int B, bool adapters, int reps, int k = 0) {
  auto cache = m.make_cache(B, kContext + reps + 1);
  std::vector<int32_t> tokens, ad;
  std::vector<sk::model::SeqStep> seqs;
  std::mt19937 rng(B);
  for (int i = 0; i < B; i++) {
    seqs.push_back({i, 0, kContext});
    for (int t = 0; t < kContext; t++) tokens.push_back(static_cast<int32_t>(rng() % 50000));
    ad.push_back(adapters ? (k > 0 ? i % k : i) : -1);
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
  CLI::App app{"bench_lora: decode step latency vs batch and adapter sharing, beside the floor"};
  std::string out = "out/bench_lora";
  std::vector<int> batches = {1, 2, 4, 8, 16, 32, 64}, shares = {0};
  int reps = 3;
  app.add_option("--out", out, "folder for lora_step.csv and lora_step.png");
  app.add_option("--batches", batches, "batch sizes")->delimiter(',');
  app.add_option("--shares", shares,
                 "adapters per step: 0 every row its own, k rows share k adapters in turn")
      ->delimiter(',')
      ->check(CLI::Range(0, 4096));
  app.add_option("--reps", reps, "timed steps per point (the median is kept)")
      ->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  fs::create_directories(out);
  int n_ad = *std::max_element(batches.begin(), batches.end());
  n_ad = std::max(n_ad, *std::max_element(shares.begin(), shares.end()));

  std::fprintf(stderr, "measuring read bandwidth ...\n");
  const double bw = sk::bench::read_bandwidth_gbs();
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

  std::size_t ad_bytes = 0;
  for (int i = 0; i < n_ad; i++) ad_bytes += gathered.adapter(i)->bytes();
  std::printf("one decode step, %d cached tokens per row; read bandwidth %.1f GB/s (this run)\n",
              kContext, bw);
  std::printf("base weights %.0f MB; %d adapters %.0f MB (%.1f MB each on average)\n",
              none.weight_bytes() / 1e6, n_ad, ad_bytes / 1e6, ad_bytes / 1e6 / n_ad);
  std::ofstream csv(fs::path(out) / "lora_step.csv");
  csv << "share,batch,none_ms,loop_ms,gathered_ms,segmented_ms,floor_ms\n";
  for (int k : shares) {
    if (k == 0)
      std::printf("\n== every row its own adapter (row i on adapter i)\n");
    else
      std::printf("\n== %d adapter%s shared by the rows (row i on adapter i %% %d)\n", k,
                  k == 1 ? "" : "s", k);
    std::printf("%6s %10s %10s %12s %13s %10s   %s\n", "batch", "none ms", "loop ms", "gathered ms",
                "segmented ms", "floor ms", "vs none: loop / gathered / segmented / floor");
    for (int B : batches) {
      std::fprintf(stderr, "  share %d, batch %d...\r", k, B);
      // The floor: the base step, and each distinct adapter of the step read once.
      const int distinct = k == 0 ? B : std::min(k, B);
      std::size_t bytes = 0;
      for (int i = 0; i < distinct; i++) bytes += gathered.adapter(i)->bytes();
      const double tn = step_seconds(none, B, false, reps) * 1e3;
      const double tl = step_seconds(loop, B, true, reps, k) * 1e3;
      const double tg = step_seconds(gathered, B, true, reps, k) * 1e3;
      const double ts = step_seconds(segmented, B, true, reps, k) * 1e3;
      const double tf = tn + bytes / (bw * 1e9) * 1e3;
      std::printf("%6d %10.2f %10.2f %12.2f %13.2f %10.2f   %.2fx / %.2fx / %.2fx / %.2fx\n", B, tn,
                  tl, tg, ts, tf, tl / tn, tg / tn, ts / tn, tf / tn);
      std::fflush(stdout);
      csv << k << ',' << B << ',' << tn << ',' << tl << ',' << tg << ',' << ts << ',' << tf << '\n';
    }
  }
  csv.close();
  // One line per (policy, sharing): its step over the base step, against the batch.
  const std::string c = (fs::path(out) / "lora_step.csv").string();
  std::string lines;
  int dash = 0;  // one dash pattern per sharing, one colour per policy
  for (int k : shares) {
    dash++;
    const std::string who = k == 0 ? "own" : std::to_string(k) + " shared";
    const std::string rows = "(strcol(1) eq '" + std::to_string(k) + "' ? ";
    for (auto [col, name] : {std::pair{5, "gathered"}, {6, "segmented"}, {7, "floor"}})
      lines += std::string(lines.empty() ? "" : ", ") + "'" + c + "' using 2:" + rows + "$" +
               std::to_string(col) + "/$3 : 1/0) skip 1 with linespoints lw 2 lc " +
               std::to_string(col - 4) + " dt " + std::to_string(dash) + " title '" + name + ", " +
               who + "'";
  }
  sk::bench::plot(fs::path(out) / "lora_step.gp",
                  "set terminal pngcairo size 900,520\nset output '" +
                      (fs::path(out) / "lora_step.png").string() +
                      "'\nset datafile separator ','\nset key top left\nset logscale x 2\n"
                      "set xlabel 'batch size'\nset ylabel 'decode step / no-LoRA step'\nset grid\n"
                      "set title 'GPT-2 small, host f32: LoRA dispatch and its floor'\nplot " +
                      lines + "\n");
  std::printf("wrote %s and lora_step.png\n", c.c_str());
}
