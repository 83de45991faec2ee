// SPDX-License-Identifier: Apache-2.0
// Speculative decoding with a draft model, beside plain decoding and n-gram lookup, in one run,
// for a random GPT-2 medium (f32, host, contiguous KV) and two drafts in u8 weights:
//   distil  DistilGPT-2's shape (6 layers of 768), its own random weights: the textbook pairing,
//           whose acceptance random weights make near nothing;
//   self-N  the target's own embeddings and first N layers (layer-skipping self-speculation):
//           with random weights, whose residual stream the embeddings dominate, it agrees with
//           the target often, so the engine's measured points reach high acceptance.
// Parts:
//   steps   what a step costs: the target's plain decode step and its verify step (k + 1 rows a
//           sequence), and each draft's decode step, at each batch size (medians of --reps);
//   engine  decode tokens/s of plain, ngram and each draft (k = --k; proposing whenever the pace
//           allows, or with --rule cost only while the engine's measured step cost says the rows
//           pay), rounds alternating, at each temperature, with the measured acceptance rate and
//           the speedup predicted for it.
// The prediction: k proposals, each accepted with probability a while the ones before it were,
// yield E = (1 - a^(k+1)) / (1 - a) tokens for one verify step and k draft forwards (a catch-up
// and k - 1 decodes), so speedup(a) = E * t(decode) / (t(verify k) + k * t(draft)). Random
// weights make acceptance artificial: read the curve at a real pair's acceptance rate. Writes
// steps.csv, engine.csv, predicted.csv and speedup.png into --out.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common.hpp"
#include "speculation_runs.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/engine.hpp"

namespace fs = std::filesystem;
namespace sk = servekit;
namespace serve = servekit::serve;
using Target = sk::Gpt2<sk::Config<sk::dims::Gpt2Medium>>;
using U8 = sk::weights::U8ZeroPoint<sk::weights::PerChannel>;
using Distil = sk::Gpt2<sk::Config<sk::dims::DistilGpt2, U8>>;
using Self2 = sk::Gpt2<sk::Config<sk::dims::Tiny<2, 16, 1024, 50257, 1024>, U8>>;
using servekit::bench::expected_tokens;
using servekit::bench::Measured;
using servekit::bench::motif_requests;
using servekit::bench::now_s;
using servekit::bench::percentile;
using servekit::bench::plot;
using servekit::bench::run_engine;

struct Args {
  std::string vocab = sk::text::default_vocab_dir().string(), out = "out/bench_speculative_draft";
  std::vector<int> batches = {1, 4, 16};
  std::vector<float> temperatures = {0.f, 0.5f};
  int k = 4, prompt = 64, new_tokens = 64, rounds = 1, reps = 5;
  serve::SpecRule rule = serve::SpecRule::always;
};

// A draft the engine can take, made afresh for each run (so no run finds its prompts cached),
// and what one decode step of it costs at a batch size.
struct Draft {
  std::string name;
  std::function<std::shared_ptr<serve::Drafter>(int slots, int max_len)> make;
  std::function<double(int batch, int prompt)> step_s;
  std::size_t bytes = 0;
  std::vector<double> step_ms;  // per batch size
};

// Seconds of one step of m in which each of `batch` sequences (n_past = prompt, after an
// untimed prefill) feeds `rows` tokens and gets their logits.
template <class M>
double step_s(M& m, typename M::Cache& cache, int batch, int rows, int prompt) {
  std::vector<sk::model::SeqStep> seqs;
  for (int i = 0; i < batch; i++) seqs.push_back({i, prompt, rows, 0, rows});
  std::vector<int32_t> tokens(static_cast<std::size_t>(batch) * rows, 464);
  static std::vector<float> logits;
  const double t0 = now_s();
  m.forward(cache, {tokens, seqs}, logits);
  return now_s() - t0;
}
template <class M>
void prefill(M& m, typename M::Cache& cache, int batch, int prompt) {
  std::vector<sk::model::SeqStep> seqs;
  for (int i = 0; i < batch; i++) seqs.push_back({i, 0, prompt, 0, 1});
  std::vector<int32_t> tokens(static_cast<std::size_t>(batch) * prompt);
  std::mt19937_64 rng(1);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % 50000);
  std::vector<float> logits;
  m.forward(cache, {tokens, seqs}, logits);
}

template <class M>
Draft draft_of(std::string name, M& m, int max_batch, int prompt) {
  auto cache = std::make_shared<typename M::Cache>(m.make_cache(max_batch, prompt + 8));
  prefill(m, *cache, max_batch, prompt);
  return {std::move(name),
          [&m](int slots, int max_len) {
            return std::make_shared<serve::DraftModel<M>>(m, slots, max_len);
          },
          [&m, cache](int batch, int p) { return step_s(m, *cache, batch, 1, p); },
          m.weight_bytes()};
}

struct StepCosts {
  int batch;
  double decode_ms, verify_ms;
};

std::vector<StepCosts> steps(Target& m, std::vector<Draft>& drafts, const Args& a) {
  std::printf("\n== step costs: %d-token contexts, median of %d (ms)\n", a.prompt, a.reps);
  std::printf("%6s %10s %16s", "batch", "decode", "verify k");
  for (const Draft& d : drafts) std::printf(" %16s", ("draft " + d.name).c_str());
  std::printf("\n");
  const int B = *std::max_element(a.batches.begin(), a.batches.end());
  auto cache = m.make_cache(B, a.prompt + a.k + 2);
  prefill(m, cache, B, a.prompt);
  std::ofstream f(fs::path(a.out) / "steps.csv");
  f << "batch,decode_ms,verify_ms";
  for (const Draft& d : drafts) f << ",draft_" << d.name << "_ms";
  f << "\n";
  std::vector<StepCosts> out;
  for (int b : a.batches) {
    // The shapes take turns, rep by rep; one untimed round first grows the buffers.
    std::vector<std::vector<double>> t(2 + drafts.size());
    for (int r = 0; r <= a.reps; r++) {
      const double plain = step_s(m, cache, b, 1, a.prompt);
      const double verify = step_s(m, cache, b, a.k + 1, a.prompt);
      if (r > 0) t[0].push_back(1e3 * plain), t[1].push_back(1e3 * verify);
      for (std::size_t i = 0; i < drafts.size(); i++) {
        const double s = drafts[i].step_s(b, a.prompt);
        if (r > 0) t[2 + i].push_back(1e3 * s);
      }
    }
    StepCosts c{b, percentile(t[0], 50), percentile(t[1], 50)};
    std::printf("%6d %10.2f %9.2f (%.2fx)", b, c.decode_ms, c.verify_ms, c.verify_ms / c.decode_ms);
    f << b << "," << c.decode_ms << "," << c.verify_ms;
    for (std::size_t i = 0; i < drafts.size(); i++) {
      const double ms = percentile(t[2 + i], 50);
      drafts[i].step_ms.push_back(ms);
      std::printf(" %9.2f (%.2fx)", ms, ms / c.decode_ms);
      f << "," << ms;
    }
    std::printf("\n");
    f << "\n";
    std::fflush(stdout);
    out.push_back(c);
  }
  return out;
}

double predicted(const StepCosts& c, double draft_ms, double acc, int k) {
  return expected_tokens(acc, k) * c.decode_ms / (c.verify_ms + k * draft_ms);
}

void engine(Target& m, const sk::text::Gpt2Tokenizer& tok, const Args& a,
            const std::vector<StepCosts>& costs, const std::vector<Draft>& drafts) {
  std::printf(
      "\n== engine: %d-token prompts (a motif repeated), %d new tokens, k = %d, %d rounds, rule "
      "%s (decode tokens/s; accept: acceptance rate; pred: the speedup the step costs predict "
      "at it)\n",
      a.prompt, a.new_tokens, a.k, a.rounds, a.rule == serve::SpecRule::cost ? "cost" : "always");
  std::ofstream f(fs::path(a.out) / "engine.csv");
  f << "batch,temperature,way,tok_s,speedup,acceptance,predicted\n";
  const int ways = 2 + static_cast<int>(drafts.size());  // plain, ngram, drafts
  for (std::size_t bi = 0; bi < costs.size(); bi++) {
    const StepCosts& c = costs[bi];
    for (float T : a.temperatures) {
      const auto rs = motif_requests(a.prompt, a.new_tokens, c.batch, T);
      std::vector<Measured> sum(ways);
      for (int r = 0; r < a.rounds; r++)
        for (int i = 0; i < ways; i++) {
          const int way = (r + i) % ways;  // rotate who goes first
          std::fprintf(stderr, "\r  batch %d T %.1f round %d/%d way %d/%d  ", c.batch, T, r + 1,
                       a.rounds, way + 1, ways);
          serve::Speculation sp{.k = way == 0 ? 0 : a.k, .rule = a.rule};
          if (way >= 2) sp.draft = drafts[way - 2].make(c.batch, a.prompt + a.new_tokens + a.k);
          sum[way].add(run_engine(m, tok, rs, sp));
        }
      std::fprintf(stderr, "\r%60s\r", "");
      const double plain = sum[0].rate();
      std::printf("batch %2d T %.1f: plain %7.1f", c.batch, T, plain);
      f << c.batch << "," << T << ",plain," << plain << ",1,0,1\n";
      for (int w = 1; w < ways; w++) {
        const double rate = sum[w].rate(), acc = sum[w].acceptance();
        const std::string name = w == 1 ? "ngram" : drafts[w - 2].name;
        const double pred = w == 1 ? 0 : predicted(c, drafts[w - 2].step_ms[bi], acc, a.k);
        std::printf(" | %s %7.1f (%.2fx, accept %.2f", name.c_str(), rate, rate / plain, acc);
        if (w > 1) std::printf(", pred %.2fx", pred);
        std::printf(")");
        f << c.batch << "," << T << "," << name << "," << rate << "," << rate / plain << "," << acc
          << "," << pred << "\n";
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
}

// Per draft and batch size, the predicted speedup against acceptance; the measured points.
void draw(const Args& a, const std::vector<StepCosts>& costs, const std::vector<Draft>& drafts,
          bool measured) {
  const fs::path curve = fs::path(a.out) / "predicted.csv";
  std::ofstream f(curve);
  f << "acceptance";
  for (const Draft& d : drafts)
    for (const auto& c : costs) f << "," << d.name << "_batch" << c.batch;
  f << "\n";
  for (int i = 0; i <= 100; i++) {
    const double acc = i / 100.0;
    f << acc;
    for (const Draft& d : drafts)
      for (std::size_t b = 0; b < costs.size(); b++)
        f << "," << predicted(costs[b], d.step_ms[b], acc, a.k);
    f << "\n";
  }
  f.close();
  std::string s =
      "set datafile separator ','\nset terminal pngcairo size 960,600\nset output '" +
      (fs::path(a.out) / "speedup.png").string() +
      "'\nset title 'draft-model speculation, GPT-2 medium target, k = " + std::to_string(a.k) +
      "'\nset xlabel 'acceptance rate'\nset ylabel 'decode speedup (x)'\nset key "
      "left top\nset grid\nset yrange [0:*]\nplot ";
  int col = 2;
  for (std::size_t di = 0; di < drafts.size(); di++)
    for (std::size_t b = 0; b < costs.size(); b++)
      s += "'" + curve.string() + "' using 1:" + std::to_string(col++) + " with lines lw 2 dt " +
           std::to_string(di + 1) + " lc " + std::to_string(b + 1) + " title 'predicted, " +
           drafts[di].name + ", batch " + std::to_string(costs[b].batch) + "', ";
  if (measured)
    for (std::size_t di = 0; di < drafts.size(); di++)
      for (std::size_t b = 0; b < costs.size(); b++)
        s += "'" + (fs::path(a.out) / "engine.csv").string() +
             "' using (($1 == " + std::to_string(costs[b].batch) + " && strcol(3) eq '" +
             drafts[di].name + "') ? $6 : 1/0):5 with points pt " + std::to_string(7 + 2 * di) +
             " ps 1.5 lc " + std::to_string(b + 1) + " title 'measured, " + drafts[di].name +
             ", batch " + std::to_string(costs[b].batch) + "', ";
  s += "1 with lines dt 3 lc 'gray' title 'plain'\n";
  plot(fs::path(a.out) / "speedup.gp", s);
}

int main(int argc, char** argv) {
  Args a;
  bool no_engine = false;
  CLI::App app{"servekit draft-model speculative decoding benchmark"};
  app.add_option("--vocab", a.vocab, "GPT-2 vocabulary folder");
  app.add_option("--out", a.out, "folder for the CSVs and the PNG");
  app.add_option("--batches", a.batches, "batch sizes")->delimiter(',')->check(CLI::Range(1, 64));
  app.add_option("--temperatures", a.temperatures, "engine: sampling temperatures (0: greedy)")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 4.0));
  app.add_option("--k", a.k, "proposed tokens per step")->check(CLI::Range(1, 16));
  app.add_option("--prompt", a.prompt, "prompt tokens")->check(CLI::Range(8, 768));
  app.add_option("--new", a.new_tokens, "new tokens")->check(CLI::Range(1, 256));
  app.add_option("--rounds", a.rounds, "engine: rounds (each way once, in turn)")
      ->check(CLI::Range(1, 100));
  app.add_option("--reps", a.reps, "steps: repetitions per step shape")->check(CLI::Range(1, 100));
  app.add_flag("--no-engine", no_engine, "step costs and the predicted curves only");
  std::string rule = "always";
  app.add_option("--rule", rule,
                 "engine: always (propose whenever the pace allows) or cost "
                 "(the engine's default: only while the rows pay)")
      ->check(CLI::IsMember({"always", "cost"}));
  CLI11_PARSE(app, argc, argv);
  a.rule = rule == "cost" ? serve::SpecRule::cost : serve::SpecRule::always;
  try {
    fs::create_directories(a.out);
    auto tok = sk::text::Gpt2Tokenizer::from_dir(a.vocab);
    const int B = *std::max_element(a.batches.begin(), a.batches.end());
    std::fprintf(stderr, "bench_speculative_draft: random GPT-2 medium (seed 0) and drafts\n");
    auto tensors = sk::model::random_gpt2<sk::dims::Gpt2Medium>(0);
    auto self_tensors = tensors;  // the target's embeddings, ln_f and first 2 layers
    self_tensors.layers.resize(2);
    self_tensors.config.n_layer = 2;
    Target target(std::move(tensors));
    Self2 self2(std::move(self_tensors));
    Distil distil = Distil::random(1);
    std::vector<Draft> drafts;
    drafts.push_back(draft_of("self-2", self2, B, a.prompt));
    drafts.push_back(draft_of("distil", distil, B, a.prompt));
    std::printf("target %s: %.0f MB of weights", Target::name().c_str(),
                target.weight_bytes() / 1e6);
    for (const Draft& d : drafts) std::printf("; draft %s: %.0f MB", d.name.c_str(), d.bytes / 1e6);
    std::printf("\n");
    const auto costs = steps(target, drafts, a);
    if (!no_engine) engine(target, tok, a, costs, drafts);
    draw(a, costs, drafts, !no_engine);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_speculative_draft: error: %s\n", e.what());
    return 1;
  }
}
