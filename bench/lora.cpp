// SPDX-License-Identifier: Apache-2.0
// Lesson 6's measurement: one step of GPT-2 small dims against the batch size, for each LoRA
// dispatch policy beside the base model without LoRA and the floor, in the same run:
//   loop       one masked pass over the batch per distinct adapter (the course's loop)
//   gathered   each row its own A and B (BGMV)
//   segmented  rows grouped by adapter, shrink then expand per group (SGMV)
//   merged     one adapter for every row only: its delta added into the base weights, the base
//              model's speed (the reference with one adapter)
//   floor      the base step plus, whichever is larger, the step's distinct adapters' bytes at
//              the read bandwidth or their FLOPs (2 per A and B value per token) at the FMA
//              peak, both measured here
// --phases: decode (one new token per row, 32 cached) and prefill (a 128-token prompt per row).
// --shares says how the rows share adapters: 0, every row its own (row i on adapter i); k, k
// adapters shared by the rows in turn (row i on adapter i % k), e.g. 8 groups or 1 for all.
// --ranks: "mixed" (4..16 at random) or a fixed rank; every adapter on all four linears.
// Writes lora_step.csv and lora_step.png (each policy's step over the base step, one panel per
// phase and ranks) into --out. Host backend, f32, random weights; bench/lora_cuda.cu compiles
// the same on the Cuda backend with f16 base weights (the adapters stay f32, as PEFT saves them,
// except the segmented policy's: fp16 on tensor cores, kernels/lora_mma.hpp, so its adapters
// weigh half, and it gets a floor of its own, "seg. floor", from those bytes), its floors from
// the device's read bandwidth and CUDA-core FMA rate (bench/device_peaks.cuh).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "common.hpp"
#if defined(__CUDACC__)
#include "device_peaks.cuh"
#include "servekit/backend/cuda_device.hpp"
#endif
#include "servekit/lora/adapter.hpp"
#include "servekit/lora/random_adapter.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/model/merge_lora.hpp"
#include "servekit/model/random_gpt2.hpp"

namespace fs = std::filesystem;
namespace sk = servekit;
using D = sk::dims::Gpt2Small;
#if defined(__CUDACC__)
using Weights = sk::weights::F16;
using Backend = sk::backend::Cuda;
constexpr const char* kWhere = "cuda f16";
#else
using Weights = sk::weights::F32;
using Backend = sk::backend::Host;
constexpr const char* kWhere = "host f32";
#endif
template <class L>
using Model = sk::Gpt2<sk::Config<D, Weights, sk::kv::Contiguous, L, Backend>>;
using AdapterPtr = std::shared_ptr<const sk::lora::Adapter>;
constexpr int kContext = 32;  // decode: tokens already in each row's cache
constexpr int kPrompt = 128;  // prefill: tokens of each row's prompt

// The rank of adapter i under a --ranks value: "mixed" draws 4..16.
int rank_of(const std::string& ranks, std::mt19937_64& rng) {
  return ranks == "mixed" ? 4 + static_cast<int>(rng() % 13) : std::stoi(ranks);
}

// One policy's step for B rows, row i on adapter i % k (k 0: i; adapters false: none), ready
// to be timed again and again. Decode: one token per row after kContext cached (each rep one
// position further); prefill: kPrompt tokens per row from position 0.
template <class M>
struct Stepper {
  M& m;
  bool prefill;
  typename M::Cache cache;
  std::vector<int32_t> prompt, tokens, ad;
  std::vector<sk::model::SeqStep> seqs;
  std::vector<sk::RowSampling> samp;  // greedy
  std::vector<int32_t> ids;
  std::vector<float> lp, logits;

  Stepper(M& model, bool pre, int B, bool adapters, int reps, int k)
      : m(model), prefill(pre), cache(model.make_cache(B, kPrompt + kContext + reps + 1)) {
    std::mt19937 rng(B);
    const int n0 = prefill ? kPrompt : kContext;
    for (int i = 0; i < B; i++) {
      seqs.push_back({i, 0, n0});
      for (int t = 0; t < n0; t++) prompt.push_back(static_cast<int32_t>(rng() % 50000));
      ad.push_back(adapters ? (k > 0 ? i % k : i) : -1);
    }
    samp.resize(B), ids.resize(B), lp.resize(B);
    step(prompt);  // untimed
  }
  double seconds(int r) {
    const int B = static_cast<int>(seqs.size());
    if (prefill) {
      for (int i = 0; i < B; i++) seqs[i] = {i, 0, kPrompt};
      tokens = prompt;
    } else {
      tokens.assign(B, 0);
      for (int i = 0; i < B; i++) seqs[i] = {i, kContext + r, 1}, tokens[i] = 42 + i;
    }
    const double t0 = sk::bench::now_s();
    step(tokens);
    return sk::bench::now_s() - t0;
  }
  // A device picks the rows' tokens itself (greedy), so that only B ids come back once the step
  // has finished; the host returns the rows' logits.
  void step(const std::vector<int32_t>& t) {
    const sk::model::Batch b{t, seqs, sk::model::Logits::Last, ad};
    if constexpr (M::kDeviceSampling)
      m.forward_pick(cache, b, samp, ids, lp);
    else
      m.forward(cache, b, logits);
  }
};

double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Machine {
  double bw_gbs, fma_gflops;
};

struct Row {
  std::string phase, ranks;
  int share, batch;
  double none, loop, gathered, segmented, merged, floor;  // ms; < 0: not run
  double floor_seg;  // the segmented policy's, from its adapters' bytes as it stores them
};

// Does the segmented policy store its adapters in other bytes than the others (16-bit on the
// device's tensor cores)? Then it has a floor of its own.
constexpr bool kSegmentedOwnFloor =
    !std::is_same_v<Model<sk::lora::Segmented>::LoraFormat, sk::weights::F32>;

std::string ms(double v, int w) {
  char b[32];
  if (v < 0)
    std::snprintf(b, sizeof b, "%*s", w, "-");
  else
    std::snprintf(b, sizeof b, "%*.2f", w, v);
  return b;
}

std::string ratio(double v, double base) {
  char b[32];
  if (v < 0) return "-";
  std::snprintf(b, sizeof b, "%.2fx", v / base);
  return b;
}

// Every (share, batch) of one phase and ranks setting, printed as it goes.
void measure(const std::string& phase, const std::string& ranks, const std::vector<int>& shares,
             const std::vector<int>& batches, const std::vector<AdapterPtr>& adapters,
             const sk::model::Gpt2Tensors& tensors, const Machine& mc, int reps, double loop_limit,
             std::vector<Row>& out) {
  const bool prefill = phase == "prefill";
  Model<sk::lora::None> none(tensors);
  Model<sk::lora::Loop> loop(tensors);
  Model<sk::lora::Gathered> gathered(tensors);
  Model<sk::lora::Segmented> segmented(tensors);
  for (const auto& a : adapters)
    loop.add_adapter(a), gathered.add_adapter(a), segmented.add_adapter(a);
  std::unique_ptr<Model<sk::lora::None>> merged;  // adapter 0 merged, for one-adapter steps
  if (std::find(shares.begin(), shares.end(), 1) != shares.end()) {
    sk::model::Gpt2Tensors t = tensors;
    sk::lora::merge(t, *adapters[0]);
    merged = std::make_unique<Model<sk::lora::None>>(std::move(t));
  }
  const int tokens = prefill ? kPrompt : 1;
  for (int k : shares) {
    std::printf("\n== %s, ranks %s, ", phase.c_str(), ranks.c_str());
    if (k == 0)
      std::printf("every row its own adapter (row i on adapter i)\n");
    else
      std::printf("%d adapter%s shared by the rows (row i on adapter i %% %d)\n", k,
                  k == 1 ? "" : "s", k);
    std::printf("%6s %10s %10s %12s %13s %10s %10s   %s\n", "batch", "none ms", "loop ms",
                "gathered ms", "segmented ms", "merged ms", "floor ms",
                "vs none: loop / gathered / segmented / merged / floor");
    for (int B : batches) {
      std::fprintf(stderr, "  %s, ranks %s, share %d, batch %d...\r", phase.c_str(), ranks.c_str(),
                   k, B);
      const int distinct = k == 0 ? B : std::min(k, B);
      double bytes = 0, bytes_seg = 0, flops = 0;
      for (int i = 0; i < distinct; i++) {
        bytes += Model<sk::lora::Gathered>::adapter_bytes(*adapters[i]);
        bytes_seg += Model<sk::lora::Segmented>::adapter_bytes(*adapters[i]);
      }
      for (int i = 0; i < B; i++)  // 2 FLOPs per A and B value per token of the row
        flops += 2.0 * tokens * adapters[k > 0 ? i % k : i]->bytes() / sizeof(float);
      Row r{phase, ranks, k, B, 0, -1, 0, 0, -1, 0, 0};
      // The policies take turns within each rep, so that the machine's drift over the run
      // falls on all of them alike; the median of each is kept.
      std::vector<double> tn, tl, tg, ts, tm;
      Stepper sn(none, prefill, B, false, reps, k);
      Stepper sg(gathered, prefill, B, true, reps, k);
      Stepper ss(segmented, prefill, B, true, reps, k);
      std::optional<Stepper<Model<sk::lora::None>>> sm;
      if (k == 1 && merged) sm.emplace(*merged, prefill, B, false, reps, k);
      for (int i = 0; i < reps; i++) {
        tn.push_back(sn.seconds(i)), tg.push_back(sg.seconds(i)), ts.push_back(ss.seconds(i));
        if (sm) tm.push_back(sm->seconds(i));
      }
      r.none = median(tn) * 1e3, r.gathered = median(tg) * 1e3, r.segmented = median(ts) * 1e3;
      if (!tm.empty()) r.merged = median(tm) * 1e3;
      // The loop runs the whole batch once per adapter; past --loop-limit seconds it is left out.
      if (distinct * r.none / 1e3 * (reps + 1) <= loop_limit) {
        Stepper sl(loop, prefill, B, true, reps, k);
        for (int i = 0; i < reps; i++) tl.push_back(sl.seconds(i));
        r.loop = median(tl) * 1e3;
      }
      auto floor = [&](double b) {
        return r.none + std::max(b / (mc.bw_gbs * 1e9), flops / (mc.fma_gflops * 1e9)) * 1e3;
      };
      r.floor = floor(bytes), r.floor_seg = floor(bytes_seg);
      std::printf("%6d %s %s %s %s %s %s   %s / %s / %s / %s / %s\n", B, ms(r.none, 10).c_str(),
                  ms(r.loop, 10).c_str(), ms(r.gathered, 12).c_str(), ms(r.segmented, 13).c_str(),
                  ms(r.merged, 10).c_str(), ms(r.floor, 10).c_str(), ratio(r.loop, r.none).c_str(),
                  ratio(r.gathered, r.none).c_str(), ratio(r.segmented, r.none).c_str(),
                  ratio(r.merged, r.none).c_str(), ratio(r.floor, r.none).c_str());
      if (kSegmentedOwnFloor)
        std::printf("%6s seg. floor %.2f ms, %s (its 16-bit adapters)\n", "", r.floor_seg,
                    ratio(r.floor_seg, r.none).c_str());
      std::fflush(stdout);
      out.push_back(r);
    }
  }
}

// One panel per (phase, ranks): gathered, segmented and the floor over the base step, a line
// per sharing.
void plot(const fs::path& dir, const std::vector<std::string>& phases,
          const std::vector<std::string>& ranks, const std::vector<int>& shares) {
  const std::string c = (dir / "lora_step.csv").string();
  std::string script = "set terminal pngcairo size " + std::to_string(520 * ranks.size()) + "," +
                       std::to_string(420 * phases.size()) + "\nset output '" +
                       (dir / "lora_step.png").string() +
                       "'\nset datafile separator ','\nset key top left font ',8'\n"
                       "set logscale x 2\nset xlabel 'batch size'\nset ylabel 'step / no-LoRA "
                       "step'\nset grid\nset multiplot layout " +
                       std::to_string(phases.size()) + "," + std::to_string(ranks.size()) + "\n";
  for (const auto& ph : phases)
    for (const auto& rk : ranks) {
      std::string lines;
      int dash = 0;  // one dash pattern per sharing, one colour per policy
      for (int k : shares) {
        dash++;
        const std::string who = k == 0 ? "own" : std::to_string(k) + " shared";
        const std::string rows = "(strcol(1) eq '" + ph + "' && strcol(2) eq '" + rk +
                                 "' && strcol(3) eq '" + std::to_string(k) + "' ? ";
        std::vector<std::pair<int, const char*>> cols = {
            {7, "gathered"}, {8, "segmented"}, {10, "floor"}};
        if (kSegmentedOwnFloor) cols.emplace_back(11, "seg. floor");
        for (auto [col, name] : cols)
          lines += std::string(lines.empty() ? "" : ", ") + "'" + c + "' using 4:" + rows + "$" +
                   std::to_string(col) + "/$5 : 1/0) skip 1 with linespoints lw 2 lc " +
                   std::to_string(col - 6) + " dt " + std::to_string(dash) + " title '" + name +
                   ", " + who + "'";
      }
      script += "set title 'GPT-2 small, " + std::string(kWhere) + ", " + ph + ", ranks " + rk +
                "'\nplot " + lines + "\n";
    }
  sk::bench::plot(dir / "lora_step.gp", script + "unset multiplot\n");
}

int main(int argc, char** argv) {
  CLI::App app{"bench_lora: LoRA step latency vs batch, sharing and rank, beside the floor"};
  std::string out = "out/bench_lora";
  std::vector<int> batches = {1, 2, 4, 8, 16, 32, 64}, prefill_batches, shares = {0};
  std::vector<std::string> phases = {"decode"}, ranks = {"mixed"};
  int reps = 3;
  double loop_limit = 60;
  app.add_option("--out", out, "folder for lora_step.csv and lora_step.png");
  app.add_option("--batches", batches, "batch sizes")->delimiter(',')->check(CLI::Range(1, 4096));
  app.add_option("--shares", shares,
                 "adapters per step: 0 every row its own, k rows share k adapters in turn")
      ->delimiter(',')
      ->check(CLI::Range(0, 4096));
  app.add_option("--prefill-batches", prefill_batches,
                 "batch sizes for prefill (default: --batches); 64 rows of 128 tokens take seconds")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  app.add_option("--phases", phases, "decode (1 token per row) and/or prefill (128 per row)")
      ->delimiter(',')
      ->check(CLI::IsMember({"decode", "prefill"}));
  app.add_option("--ranks", ranks, "mixed (4..16 at random) and/or fixed ranks, e.g. 8,16")
      ->delimiter(',')
      ->check(CLI::IsMember({"mixed"}) | CLI::Range(1, 256));
  app.add_option("--reps", reps, "timed steps per point (the median is kept)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--loop-limit", loop_limit,
                 "seconds the loop policy may take per point; beyond it the point is left out")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  if (prefill_batches.empty()) prefill_batches = batches;
  fs::create_directories(out);
  int n_ad = std::max(*std::max_element(batches.begin(), batches.end()),
                      *std::max_element(prefill_batches.begin(), prefill_batches.end()));
  n_ad = std::max(n_ad, *std::max_element(shares.begin(), shares.end()));

#if defined(__CUDACC__)
  if (const std::string why = sk::backend::cuda_device_missing(); !why.empty()) {
    std::fprintf(stderr, "bench_lora_cuda: no CUDA device (%s); nothing run\n", why.c_str());
    return sk::backend::kNoCudaDeviceExit;
  }
  std::printf("device: %s\n", sk::backend::cuda_device_summary().c_str());
  std::fprintf(stderr, "measuring the device's read bandwidth and FMA peak...\n");
  const Machine mc{sk::bench::device_read_gbs(), sk::bench::device_fma_gflops()};
#else
  std::fprintf(stderr, "measuring read bandwidth and FMA peak...\n");
  const Machine mc{sk::bench::read_bandwidth_gbs(), sk::bench::fma_gflops()};
#endif
  std::fprintf(stderr, "building GPT-2 small (random weights)...\n");
  const auto tensors = sk::model::random_gpt2<D>(1);
  std::printf(
      "%s: read bandwidth %.1f GB/s, FMA peak %.0f GFLOP/s (this run); base weights %.0f MB\n",
      kWhere, mc.bw_gbs, mc.fma_gflops, Model<sk::lora::None>(tensors).weight_bytes() / 1e6);
  std::printf("decode: 1 new token per row, %d cached; prefill: a %d-token prompt per row\n",
              kContext, kPrompt);
  std::vector<Row> rows;
  for (const auto& rk : ranks) {
    std::mt19937_64 rng(7);
    std::vector<AdapterPtr> adapters;
    double total = 0;
    for (int i = 0; i < n_ad; i++) {
      const int rank = rank_of(rk, rng);
      adapters.push_back(std::make_shared<const sk::lora::Adapter>(sk::lora::random_adapter<D>(
          {.name = "random" + std::to_string(i), .rank = rank, .alpha = 2.f * rank}, rng)));
      total += adapters.back()->bytes();
    }
    std::printf("\nranks %s: %d adapters, %.0f MB (%.1f MB each on average)\n", rk.c_str(), n_ad,
                total / 1e6, total / 1e6 / n_ad);
    for (const auto& ph : phases)
      measure(ph, rk, shares, ph == "prefill" ? prefill_batches : batches, adapters, tensors, mc,
              reps, loop_limit, rows);
  }
  const fs::path csv = fs::path(out) / "lora_step.csv";
  std::ofstream f(csv);
  f << "phase,ranks,share,batch,none_ms,loop_ms,gathered_ms,segmented_ms,merged_ms,floor_ms,"
       "segmented_floor_ms\n";
  auto cell = [](double v) { return v < 0 ? std::string() : std::to_string(v); };
  for (const auto& r : rows)
    f << r.phase << ',' << r.ranks << ',' << r.share << ',' << r.batch << ',' << r.none << ','
      << cell(r.loop) << ',' << r.gathered << ',' << r.segmented << ',' << cell(r.merged) << ','
      << r.floor << ',' << r.floor_seg << '\n';
  f.close();
  plot(out, phases, ranks, shares);
  std::printf("wrote %s and lora_step.png\n", csv.string().c_str());
}
