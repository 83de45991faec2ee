// SPDX-License-Identifier: Apache-2.0
// Lesson 6: multi-LoRA.
//
// One base model, many adapters, and a batch whose every row may want a different one. The
// base matmul x W is shared by all rows; what differs is how the small per-adapter products
// scale * (x A^T) B^T are organised (lora/policy.hpp):
//   loop       the course's first attempt: one pass over the batch per distinct adapter in it,
//              keeping the rows that use it, so the cost grows with the adapters in the batch
//   gathered   BGMV (punica): each row gathers its own adapter's A and B: one pass in all
//   segmented  SGMV (punica, S-LoRA): rows grouped by adapter, one shrink and one expand per
//              group, so rows that share an adapter share its reads
// This example, like the course:
//   1. "let's try it": next tokens of one prompt under ten adapters drawn from a pool of 64,
//      and a check that the three policies pick the same tokens for a mixed batch;
//   2. the benchmark: the latency of one generate-token call (seq_len tokens per row through
//      the whole model, as the course times it) against batch size, every row on an adapter
//      drawn at random from the pool, for no LoRA, loop, gathered and segmented; a table, a CSV
//      and a plot (out/06_multi_lora/multi_lora.{csv,png}).
// Look at: loop's latency climbing with the batch (more distinct adapters per batch) while
// gathered and segmented stay near the no-LoRA line.
// With --model DIR it uses a Hugging Face GPT-2; without, a seeded random GPT-2 124M (same
// cost, meaningless text). The adapters are random (rank --rank, all four linears).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/plot.hpp"
#include "common/run.hpp"
#include "servekit/lora/random_adapter.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/model/random_gpt2.hpp"

namespace sk = servekit;
namespace fs = std::filesystem;

namespace {

struct Args {
  std::string model, vocab, out = "out/06_multi_lora";
  std::string prompt = "The quick brown fox jumps over the";
  int adapters = 64, rank = 8, seq_len = 8, reps = 3;
  std::vector<int> batches = {1, 2, 4, 8, 16, 32, 64};
};

template <class D, class L>
using Model = sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Contiguous, L>>;

// One generate-token call as the course makes it: every row's seq_len tokens through the
// whole model (the cache is scratch, overwritten each call), row i on adapter slot ad[i]
// (-1: none). Returns each row's greedy next token.
template <class M>
std::vector<int32_t> next_tokens(M& m, typename M::Cache& cache,
                                 const std::vector<std::vector<int32_t>>& prompts,
                                 const std::vector<int32_t>& ad) {
  std::vector<int32_t> tokens;
  std::vector<sk::model::SeqStep> seqs;
  for (std::size_t i = 0; i < prompts.size(); i++) {
    seqs.push_back({static_cast<int32_t>(i), 0, static_cast<int32_t>(prompts[i].size())});
    tokens.insert(tokens.end(), prompts[i].begin(), prompts[i].end());
  }
  std::vector<float> logits;  // (B, V)
  m.forward(cache, {tokens, seqs, sk::model::Logits::Last, ad}, logits);
  std::vector<int32_t> next;
  constexpr int V = M::V;
  for (std::size_t i = 0; i < prompts.size(); i++) {
    const float* row = logits.data() + i * V;
    next.push_back(static_cast<int32_t>(std::max_element(row, row + V) - row));
  }
  return next;
}

// Median milliseconds of next_tokens over reps calls (one untimed warm-up call first).
template <class M>
double median_ms(M& m, const std::vector<std::vector<int32_t>>& prompts,
                 const std::vector<int32_t>& ad, int reps) {
  auto cache = m.make_cache(static_cast<int>(prompts.size()), static_cast<int>(prompts[0].size()));
  next_tokens(m, cache, prompts, ad);
  std::vector<double> ms;
  for (int r = 0; r < reps; r++) {
    const auto t0 = std::chrono::steady_clock::now();
    next_tokens(m, cache, prompts, ad);
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

template <class D>
int lesson(const Args& a, const sk::text::Gpt2Tokenizer& tok) {
  std::printf("loading %s ...\n", a.model.empty() ? "random GPT-2 124M (seed 0)" : a.model.c_str());
  auto base = a.model.empty() ? sk::model::random_gpt2<D>(0) : sk::model::load_gpt2<D>(a.model);
  std::printf("making %d random adapters (rank %d, all four linears) ...\n", a.adapters, a.rank);
  // One copy of each adapter, shared by the three models below.
  std::vector<std::shared_ptr<const sk::lora::Adapter>> pool;
  std::mt19937_64 rng(6);
  for (int i = 0; i < a.adapters; i++)
    pool.push_back(std::make_shared<const sk::lora::Adapter>(
        sk::lora::random_adapter<D>({.name = "lora" + std::to_string(i),
                                     .rank = a.rank,
                                     .alpha = 2.f * a.rank,
                                     .stddev = 0.05f},
                                    rng)));
  Model<D, sk::lora::None> none(base);
  Model<D, sk::lora::Loop> loop(base);
  Model<D, sk::lora::Gathered> gathered(base);
  Model<D, sk::lora::Segmented> segmented(std::move(base));
  for (const auto& p : pool) loop.add_adapter(p), gathered.add_adapter(p), segmented.add_adapter(p);
  std::printf("the pool: %.0f MB of adapters beside a %.0f MB model\n",
              pool.size() * pool[0]->bytes() / 1e6, none.weight_bytes() / 1e6);

  std::printf("\n== 1. let's try it: the next token of |%s| under ten random adapters\n",
              a.prompt.c_str());
  const auto prompt = tok.encode(a.prompt);
  std::mt19937 pick(42);
  {
    auto cache = gathered.make_cache(1, static_cast<int>(prompt.size()));
    for (int i = 0; i < 10; i++) {
      const int32_t ad = static_cast<int32_t>(pick() % pool.size());
      const int32_t t = next_tokens(gathered, cache, {prompt}, {ad})[0];
      std::printf("  %-8s -> |%s|\n", pool[ad]->name.c_str(), tok.decode(std::span(&t, 1)).c_str());
    }
  }
  std::vector<std::vector<int32_t>> mixed(8, prompt);
  std::vector<int32_t> mixed_ad;
  for (int i = 0; i < 8; i++)
    mixed_ad.push_back(i % 4 == 3 ? -1 : static_cast<int32_t>(pick() % pool.size()));
  auto c8 = loop.make_cache(8, static_cast<int>(prompt.size()));
  const auto tl = next_tokens(loop, c8, mixed, mixed_ad);
  const auto tg = next_tokens(gathered, c8, mixed, mixed_ad);
  const auto ts = next_tokens(segmented, c8, mixed, mixed_ad);
  const bool agree = tl == tg && tg == ts;
  std::printf(
      "a batch of 8 rows (6 adapters, 2 without): loop, gathered and segmented pick the "
      "same next tokens: %s\n",
      agree ? "yes" : "NO");

  std::printf(
      "\n== 2. one generate-token call (%d tokens per row) vs batch size, each row on a "
      "random adapter of %d\n",
      a.seq_len, a.adapters);
  std::printf("%6s %9s %10s %10s %12s %13s   %s\n", "batch", "adapters", "none ms", "loop ms",
              "gathered ms", "segmented ms", "vs none: loop / gathered / segmented");
  fs::create_directories(a.out);
  const fs::path csv_path = fs::path(a.out) / "multi_lora.csv";
  std::ofstream csv(csv_path);
  csv << "batch,distinct_adapters,none_ms,loop_ms,gathered_ms,segmented_ms\n";
  std::mt19937 data(7);
  for (int B : a.batches) {
    std::vector<std::vector<int32_t>> prompts(B, std::vector<int32_t>(a.seq_len));
    for (auto& p : prompts)
      for (auto& t : p) t = static_cast<int32_t>(data() % D::vocab);
    std::vector<int32_t> ad(B), no(B, -1);
    for (auto& x : ad) x = static_cast<int32_t>(data() % pool.size());
    const auto distinct = std::set<int32_t>(ad.begin(), ad.end()).size();
    std::fprintf(stderr, "  batch %d: none", B);
    const double n = median_ms(none, prompts, no, a.reps);
    std::fprintf(stderr, ", loop");
    const double l = median_ms(loop, prompts, ad, a.reps);
    std::fprintf(stderr, ", gathered");
    const double g = median_ms(gathered, prompts, ad, a.reps);
    std::fprintf(stderr, ", segmented\n");
    const double s = median_ms(segmented, prompts, ad, a.reps);
    std::printf("%6d %9zu %10.2f %10.2f %12.2f %13.2f   %.2fx / %.2fx / %.2fx\n", B, distinct, n, l,
                g, s, l / n, g / n, s / n);
    std::fflush(stdout);
    csv << B << ',' << distinct << ',' << n << ',' << l << ',' << g << ',' << s << '\n';
  }
  csv.close();
  const fs::path png = fs::path(a.out) / "multi_lora.png";
  const std::string c = csv_path.string();
  sk::examples::gnuplot(
      fs::path(a.out) / "multi_lora.gp",
      "set terminal pngcairo size 800,480\nset output '" + png.string() +
          "'\nset datafile separator ','\nset key top left\nset grid\n"
          "set xlabel 'batch size (each row on a random adapter)'\n"
          "set ylabel 'latency of one generate-token call (ms)'\n"
          "set title 'Multi-LoRA latency w.r.t. batch size'\nplot '" +
          c + "' using 1:3 skip 1 with linespoints lw 2 title 'no LoRA', '' using 1:4 skip 1 " +
          "with linespoints lw 2 title 'loop', '' using 1:5 skip 1 with linespoints lw 2 title " +
          "'gathered', '' using 1:6 skip 1 with linespoints lw 2 title 'segmented'\n");
  std::printf("wrote %s and %s\n", c.c_str(), png.c_str());
  return agree ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lesson 6: multi-LoRA (loop vs gathered vs segmented)"};
  Args a;
  sk::examples::add_model_options(app, a.model, a.vocab);
  app.add_option("--adapters", a.adapters, "random adapters in the pool")
      ->check(CLI::Range(1, 4096));
  app.add_option("--rank", a.rank, "their rank")->check(CLI::Range(1, 256));
  app.add_option("--prompt", a.prompt, "prompt of part 1");
  app.add_option("--seq-len", a.seq_len, "tokens per row in the benchmark")
      ->check(CLI::Range(1, 1024));
  app.add_option("--batches", a.batches, "batch sizes")->delimiter(',')->check(CLI::Range(1, 4096));
  app.add_option("--reps", a.reps, "timed calls per point (the median is kept)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--out", a.out, "folder for multi_lora.csv and multi_lora.png");
  CLI11_PARSE(app, argc, argv);
  return sk::examples::run_lesson(
      "06_multi_lora", a.model, a.vocab,
      [&]<class D>(std::type_identity<D>, const sk::text::Gpt2Tokenizer& tok) {
        if (a.seq_len > D::n_positions) {
          std::fprintf(stderr, "06_multi_lora: error: --seq-len %d exceeds n_positions %d\n",
                       a.seq_len, D::n_positions);
          return 2;
        }
        return lesson<D>(a, tok);
      });
}
