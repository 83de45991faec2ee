// SPDX-License-Identifier: Apache-2.0
// Lesson 2: batching.
//
// A decode step of one sequence reads every weight to produce one token; a batch of B
// sequences reads them once to produce B tokens. So batching buys throughput (tokens/s) and
// pays with latency (each step is slower, and every request waits for the whole batch).
// This example, like the course, generates a fixed number of tokens for batches of copies of
// the course's three prompts, at batch sizes 1, 2, 4, ... 128, and shows:
//   1. the batch's continuations (one padded or ragged batch: the same text as alone);
//   2. per batch size: duration, throughput, average latency per token step, and the KV
//      cache's capacity, utilisation and waste;
//   3. batching.csv and batching.png: throughput and latency against batch size (two axes).
// --layout contiguous (default) pads every prompt on the left to the longest one, with an
// attention mask and position ids, as the course does: the pads take cache rows and compute.
// --layout paged runs the same prompts as a ragged batch in a paged cache: no pads, and a
// sequence reserves at most one partly filled block.
// With --model DIR it uses a Hugging Face GPT-2; without, a seeded random GPT-2 124M (same
// cost, meaningless text).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "common/plot.hpp"
#include "common/run.hpp"
#include "servekit/model/dispatch.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/padded_batch.hpp"
#include "servekit/serve/sampling.hpp"
#include "servekit/text/tokenizer.hpp"

// The two compositions this lesson compares, named as `servekit` names them; the dispatch
// table (serve/compiled.hpp) turns --layout into one of them, as it does the CLI's flags.
#define SERVEKIT_COMPILED_COMPOSITIONS \
  "f32/contiguous/none/continuous/host", "f32/paged16/none/continuous/host"
#include "servekit/serve/compiled.hpp"

namespace fs = std::filesystem;
namespace sk = servekit;

struct Args {
  std::string model, vocab, layout = "contiguous", out = "out/02_batching";
  int tokens = 10, max_batch = 128, max_len = 0;  // the course's 10 tokens, batches up to 128
};

const std::vector<std::string> kPrompts = {"The quick brown fox jumped over the",
                                           "The rain in Spain falls", "What comes up must"};

struct Run {
  std::vector<std::vector<int32_t>> out;  // (B, tokens) greedy ids
  double seconds = 0;
  sk::kv::Capacity cap;
  long pad_tokens = 0;  // cache rows holding pads: stored, never attended to
};

// Prefill + (tokens - 1) decode steps of one static batch; greedy.
template <class Model>
Run run_batch(Model& model, const std::vector<std::vector<int32_t>>& prompts, int tokens,
              int32_t pad_id, int max_len) {
  constexpr int V = Model::Dims::vocab;
  const int B = static_cast<int>(prompts.size());
  int longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, static_cast<int>(p.size()));
  // By default room for the longest prompt and the generated tokens (the last one is produced,
  // never fed), as HF's cache grows; a server reserves its longest context instead (--max-len).
  auto cache = model.make_cache(B, max_len > 0 ? max_len : longest + tokens - 1);
  Run r;
  r.out.resize(B);
  std::vector<float> logits;
  std::vector<int32_t> next(B);
  auto take = [&] {
    for (int i = 0; i < B; i++)
      r.out[i].push_back(next[i] = sk::serve::argmax(
                             std::span(logits).subspan(static_cast<std::size_t>(i) * V, V)));
  };
  const auto t0 = std::chrono::steady_clock::now();
  if constexpr (!sk::kv::is_paged<typename Model::Config::Kv>) {
    sk::serve::PaddedBatch pb(prompts, pad_id);  // the course's left padding
    for (int i = 0; i < B; i++) r.pad_tokens += pb.pad(i);
    pb.prefill(model, cache, logits);
    take();
    for (int s = 1; s < tokens; s++) pb.decode(model, cache, next, logits), take();
  } else {
    std::vector<int32_t> flat;
    std::vector<sk::model::SeqStep> seqs;
    for (int i = 0; i < B; i++) {
      seqs.push_back({i, 0, static_cast<int32_t>(prompts[i].size())});
      flat.insert(flat.end(), prompts[i].begin(), prompts[i].end());
    }
    model.forward(cache, {flat, seqs, sk::model::Logits::Last}, logits);
    take();
    for (int s = 1; s < tokens; s++) {
      for (int i = 0; i < B; i++) seqs[i] = {i, static_cast<int32_t>(prompts[i].size()) + s - 1, 1};
      model.forward(cache, {next, seqs, sk::model::Logits::Last}, logits);
      take();
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.cap = cache.capacity();
  return r;
}

// A (rows, cols) tensor printed like torch: one bracketed row per line.
void print_rows(const char* name, const std::vector<int32_t>& t, int rows, int cols) {
  std::printf("  %s [%d, %d]:\n", name, rows, cols);
  for (int r = 0; r < rows; r++) {
    std::printf("    [");
    for (int c = 0; c < cols; c++) std::printf("%6d", t[static_cast<std::size_t>(r) * cols + c]);
    std::printf(" ]\n");
  }
}

template <class Model>
int lesson(const Args& a, const sk::text::Gpt2Tokenizer& tok, Model& model) {
  std::printf("composition: %s\n", Model::name().c_str());
  std::vector<std::vector<int32_t>> ids;
  constexpr int V = Model::Dims::vocab;
  for (const auto& p : kPrompts) {
    ids.push_back(tok.encode(p));
    for (auto& t : ids.back()) t %= V;  // test-sized models have a smaller vocabulary
  }
  const int32_t pad = tok.eos_id() < V ? tok.eos_id() : V - 1;  // the course pads with EOS

  // 0. What the model is given for the three prompts as one batch.
  if constexpr (!sk::kv::is_paged<typename Model::Config::Kv>) {
    // The course's tokenizer(prompts, padding=True) with padding_side="left", and HF's
    // position ids: each row's real tokens count from 0 whatever its padding.
    sk::serve::PaddedBatch pb(ids, pad);
    const int B = pb.rows(), Tp = pb.t_pad();
    std::printf("\nthe batch as the course builds it (left padding with id %d):\n", pad);
    print_rows("input_ids", pb.tokens(), B, Tp);
    print_rows("attention_mask", pb.attention_mask(), B, Tp);
    print_rows("position_ids", pb.position_ids(), B, Tp);
  } else {
    // A paged cache needs no padding: the prompts go in back to back, each with its own
    // slot and start position (model::SeqStep), and attention stays within a sequence.
    std::printf("\nthe batch as a ragged step (no padding):\n  input_ids [");
    int total = 0;
    for (std::size_t i = 0; i < ids.size(); i++) {
      if (i) std::printf(" |");
      for (int32_t t : ids[i]) std::printf(" %d", t);
      total += static_cast<int>(ids[i].size());
    }
    std::printf(" ]  (%d tokens)\n  sequences (slot, start position, tokens):", total);
    for (std::size_t i = 0; i < ids.size(); i++) std::printf(" (%zu, 0, %zu)", i, ids[i].size());
    std::printf("\n");
  }

  // 1. The three prompts as one batch.
  Run first = run_batch(model, ids, a.tokens, pad, a.max_len);
  const bool color = isatty(fileno(stdout));  // continuation in red, or after a '|'
  std::printf("\none batch of %zu prompts, %d tokens each:\n", ids.size(), a.tokens);
  for (std::size_t i = 0; i < ids.size(); i++)
    std::printf(color ? "  %s\033[31m%s\033[0m\n" : "  %s|%s\n", kPrompts[i].c_str(),
                tok.decode(first.out[i]).c_str());
  std::ostringstream cap;
  cap << first.cap;
  std::printf("  %s; %ld of the stored rows are padding\n", cap.str().c_str(), first.pad_tokens);

  // 2. Throughput and latency vs batch size; prompt i is the course's prompt i % 3.
  std::printf("\n%6s %10s %14s %16s   %s\n", "batch", "time (s)", "tokens/s", "latency (ms/step)",
              "KV cache rows: stored (pads) / reserved, unused");
  struct Row {
    int bs;
    double s, tps, lat_ms;
    sk::kv::Capacity cap;
    long pads;
  };
  std::vector<Row> rows;
  for (int bs = 1; bs <= a.max_batch; bs *= 2) {
    std::vector<std::vector<int32_t>> batch;
    for (int i = 0; i < bs; i++) batch.push_back(ids[i % ids.size()]);
    Run r = run_batch(model, batch, a.tokens, pad, a.max_len);
    for (int i = 0; i < bs; i++)  // batching must not change anyone's tokens
      if (r.out[i] != first.out[i % ids.size()])
        sk::fail("batch ", bs, ": row ", i, " generated other tokens than in the first batch");
    Row row{bs,    r.seconds,   bs * a.tokens / r.seconds, 1e3 * r.seconds / a.tokens,
            r.cap, r.pad_tokens};
    std::printf("%6d %10.3f %14.1f %16.1f   %ld (%ld) / %ld, unused %ld = %.2f MiB\n", bs, row.s,
                row.tps, row.lat_ms, r.cap.stored_tokens, r.pad_tokens, r.cap.reserved_tokens,
                r.cap.waste_tokens(), r.cap.waste_bytes() / 1048576.0);
    std::fflush(stdout);
    rows.push_back(row);
  }

  // 3. CSV + plot.
  fs::create_directories(a.out);
  const fs::path csv = fs::path(a.out) / ("batching_" + a.layout + ".csv");
  std::ofstream f(csv);
  f << "batch_size,duration_s,throughput_tokens_per_s,avg_latency_ms_per_step,kv_stored_tokens,"
       "kv_pad_tokens,kv_reserved_tokens,kv_unused_tokens,kv_bytes_per_token\n";
  for (const auto& r : rows)
    f << r.bs << ',' << r.s << ',' << r.tps << ',' << r.lat_ms << ',' << r.cap.stored_tokens << ','
      << r.pads << ',' << r.cap.reserved_tokens << ',' << r.cap.waste_tokens() << ','
      << r.cap.bytes_per_token << '\n';
  f.close();
  const fs::path png = fs::path(a.out) / ("batching_" + a.layout + ".png");
  sk::examples::gnuplot(
      fs::path(a.out) / ("batching_" + a.layout + ".gp"),
      "set terminal pngcairo size 900,500\nset output '" + png.string() +
          "'\nset datafile separator ','\nset key top left\nset grid\nset logscale x 2\n"
          "set title 'Throughput and latency vs batch size (" +
          Model::name() + ", " + std::to_string(a.tokens) +
          " tokens)'\nset xlabel 'batch size'\nset ylabel 'throughput (tokens/s)' tc rgb 'red'\n"
          "set y2label 'average latency (ms per token step)' tc rgb 'blue'\nset ytics nomirror\n"
          "set y2tics\nplot '" +
          csv.string() +
          "' every ::1 using 1:3 axes x1y1 with linespoints lc rgb 'red' title 'throughput', "
          "'' every ::1 using 1:4 axes x1y2 with linespoints lc rgb 'blue' title 'latency'\n");
  std::printf("\nwrote %s and %s\n", csv.c_str(), png.c_str());
  return 0;
}

template <class D>
int with_layout(const Args& a, const sk::text::Gpt2Tokenizer& tok) {
  const std::string name = std::string("f32/") + (a.layout == "paged" ? "paged16" : "contiguous") +
                           "/none/continuous/host";
  return sk::serve::dispatch_composition(
      sk::serve::spec_from_name(name), [&]<class C>(std::type_identity<C>) {
        using Model = sk::Gpt2<typename C::template Config<D>>;
        std::printf("loading %s ...\n",
                    a.model.empty() ? "random GPT-2 124M (seed 0)" : a.model.c_str());
        auto model = a.model.empty() ? Model::random(0) : Model::load(a.model);
        return lesson(a, tok, model);
      });
}

int main(int argc, char** argv) {
  CLI::App app{"Lesson 2: batching"};
  Args a;
  sk::examples::add_model_options(app, a.model, a.vocab);
  app.add_option("--layout", a.layout, "KV cache: contiguous (left-padded batch) or paged (ragged)")
      ->check(CLI::IsMember({"contiguous", "paged"}));
  app.add_option("--tokens", a.tokens, "tokens to generate per request")->check(CLI::Range(1, 256));
  app.add_option("--max-batch", a.max_batch, "largest batch size (powers of two up to it)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--max-len", a.max_len,
                 "KV cache rows per sequence (default: longest prompt + tokens - 1)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--out", a.out, "output folder for the CSV and plot");
  CLI11_PARSE(app, argc, argv);
  return sk::examples::run_lesson(
      "02_batching", a.model, a.vocab,
      [&]<class D>(std::type_identity<D>, const sk::text::Gpt2Tokenizer& tok) {
        return with_layout<D>(a, tok);
      });
}
