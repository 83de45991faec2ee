// SPDX-License-Identifier: Apache-2.0
// Lesson 1: KV caching.
//
// A decoder predicts one token per forward pass. Without a cache, each step recomputes keys
// and values for the whole sequence, so step t costs O(t) token passes; with a cache, a step
// feeds only the newest token and reads the rest from memory. This example shows:
//   1. the 10 most likely next tokens for the course's prompt, with probabilities;
//   2. the same greedy continuation generated without and with the cache, timed per token;
//   3. per_token.csv and per_token.png: time per token vs step for both. Look for the
//      no-cache line climbing with the sequence while the cached one stays flat.
// With --model DIR it uses a Hugging Face GPT-2; without, a seeded random GPT-2 124M (same
// cost, meaningless text). Built as 01_kv_cache_cuda (nvcc, SERVEKIT_BACKEND_CUDA) it runs on
// the GPU: weights, scratch and the cache in device memory.
//
// Before the timed runs, the mechanism by hand: the prompt's token ids, the logits' shape
// [1, T, vocab], then the two loops over model.forward written out, one step per line: the
// cached loop feeds one token per step and its cache grows by one row of K and V per layer;
// the uncached loop feeds the whole sequence again every step.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/plot.hpp"
#include "common/run.hpp"
#include "servekit/model/dispatch.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/generate.hpp"
#include "servekit/text/tokenizer.hpp"
#if defined(SERVEKIT_BACKEND_CUDA)
#include "servekit/backend/cuda.hpp"
#endif

namespace fs = std::filesystem;
namespace sk = servekit;

#if defined(SERVEKIT_BACKEND_CUDA)
using Backend = sk::backend::Cuda;
#else
using Backend = sk::backend::Host;
#endif

struct Args {
  std::string model, vocab, prompt = "The quick brown fox jumped over the", out = "out/01_kv_cache";
  int tokens = 40, by_hand = 6;
};

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The cache's contents for one sequence, as the course prints past_key_values: per layer a
// key and a value tensor of shape (batch, heads, rows, head_dim).
template <class D, class Cache>
std::string cache_shape(const Cache& cache) {
  const int rows = cache.length(0);
  const double kib = static_cast<double>(rows) * cache.bytes_per_token() / 1024;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%d x (K, V) [1, %d, %d, %d] = %.0f KiB", D::n_layer, D::n_head,
                rows, D::n_embd / D::n_head, kib);
  return buf;
}

template <class D>
int lesson(const Args& a, const sk::text::Gpt2Tokenizer& tok) {
  using Model =
      sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Contiguous, sk::lora::None, Backend>>;
  std::printf("loading %s ...\n", a.model.empty() ? "random GPT-2 124M (seed 0)" : a.model.c_str());
  auto model = a.model.empty() ? Model::random(0) : Model::load(a.model);
  std::printf("composition: %s\n\n", Model::name().c_str());
  auto prompt = tok.encode(a.prompt);
  const int T = static_cast<int>(prompt.size());
  std::printf("prompt: \"%s\"\ninput_ids [1, %d]:", a.prompt.c_str(), T);
  for (int32_t id : prompt) std::printf(" %d", id);
  std::printf("\ntokens:");
  for (int32_t id : prompt) std::printf(" \"%s\"", tok.token_bytes(id).c_str());
  std::printf("\n");

  // 1. One forward pass over the prompt: logits for every position; the last row is the
  // distribution of the next token.
  auto cache = model.make_cache(1);
  std::vector<float> logits, logp;
  sk::model::SeqStep s{0, 0, T};
  model.forward(cache, {prompt, std::span(&s, 1), sk::model::Logits::All}, logits);
  std::printf(
      "logits [1, %d, %d] (%zu floats): one row of scores over the vocabulary per "
      "position\n",
      T, D::vocab, logits.size());
  logits.erase(logits.begin(), logits.end() - D::vocab);  // the last position's row
  sk::serve::log_softmax(logits, logp);
  std::vector<int> idx(logp.size());
  for (std::size_t i = 0; i < idx.size(); i++) idx[i] = static_cast<int>(i);
  std::partial_sort(idx.begin(), idx.begin() + 10, idx.end(),
                    [&](int x, int y) { return logp[x] > logp[y]; });
  std::printf("top-10 next tokens (softmax of the last row):\n");
  for (int i = 0; i < 10; i++)
    std::printf("  %2d. %-16s id %5d  p = %.4f\n", i + 1,
                ("\"" + tok.token_bytes(idx[i]) + "\"").c_str(), idx[i], std::exp(logp[idx[i]]));

  // 2. The loops by hand. With the cache: prefill the prompt once, then feed one token per
  // step at the next position; the cache keeps every earlier token's K and V.
  std::printf("\ngreedy loop by hand, with the KV cache:\n");
  auto kv = model.make_cache(1);
  std::vector<int32_t> seq = prompt, by_hand_cached;
  for (int step = 0; step < a.by_hand; step++) {
    const auto t0 = std::chrono::steady_clock::now();
    const int fed = step == 0 ? T : 1;
    sk::model::SeqStep st{0, static_cast<int32_t>(seq.size()) - fed, fed};
    model.forward(kv, {std::span(seq).last(fed), std::span(&st, 1)}, logits);
    const int32_t next = sk::serve::argmax(logits);
    std::printf("  step %d: fed %3d token(s) at position %3d -> %-12s %6.1f ms; cache %s\n", step,
                fed, st.n_past, ("\"" + tok.token_bytes(next) + "\"").c_str(), ms_since(t0),
                cache_shape<D>(kv).c_str());
    seq.push_back(next);
    by_hand_cached.push_back(next);
  }
  // Without: every step runs the whole sequence from position 0 (the rows it writes are
  // thrown away by the next step, which writes them all again).
  std::printf("greedy loop by hand, without a cache (the whole sequence every step):\n");
  seq = prompt;
  std::vector<int32_t> by_hand_plain;
  for (int step = 0; step < a.by_hand; step++) {
    const auto t0 = std::chrono::steady_clock::now();
    auto fresh = model.make_cache(1, static_cast<int>(seq.size()));
    sk::model::SeqStep st{0, 0, static_cast<int32_t>(seq.size())};
    model.forward(fresh, {seq, std::span(&st, 1)}, logits);
    const int32_t next = sk::serve::argmax(logits);
    std::printf("  step %d: fed %3zu token(s) at positions 0..%-3zu -> %-12s %6.1f ms\n", step,
                seq.size(), seq.size() - 1, ("\"" + tok.token_bytes(next) + "\"").c_str(),
                ms_since(t0));
    seq.push_back(next);
    by_hand_plain.push_back(next);
  }
  std::printf("same tokens by both loops: %s\n", by_hand_cached == by_hand_plain ? "yes" : "NO");

  // 3. The same greedy continuation through serve::generate, without then with the cache,
  // timed per token.
  sk::serve::GenerateOptions opt;
  opt.stop.max_new_tokens = a.tokens;
  opt.stop.stop_at_eos = false;
  sk::serve::GenerateResult runs[2];
  for (int c = 0; c < 2; c++) {
    opt.use_cache = c == 1;
    std::printf("\ngenerating %d tokens %s the KV cache: ", a.tokens, c ? "with" : "without");
    std::fflush(stdout);
    runs[c] = sk::serve::generate(model, tok, prompt, opt, [](std::string_view, const auto&) {
      std::putchar('.');
      std::fflush(stdout);
      return true;
    });
    double sum = 0;
    for (auto& t : runs[c].tokens) sum += t.ms;
    std::printf("\n  %.1f ms total, %.1f ms per token; text: %s\n", sum,
                sum / runs[c].tokens.size(), runs[c].text.c_str());
  }
  std::printf("\nsame tokens with and without the cache: %s\n",
              runs[0].ids() == runs[1].ids() ? "yes" : "NO");

  // 4. CSV + plot.
  fs::create_directories(a.out);
  const fs::path csv = fs::path(a.out) / "per_token.csv";
  std::ofstream f(csv);
  f << "step,sequence_length,no_cache_ms,kv_cache_ms\n";
  for (std::size_t i = 0; i < runs[0].tokens.size(); i++)
    f << i << ',' << prompt.size() + i << ',' << runs[0].tokens[i].ms << ',' << runs[1].tokens[i].ms
      << '\n';
  f.close();
  const fs::path png = fs::path(a.out) / "per_token.png";
  sk::examples::gnuplot(fs::path(a.out) / "per_token.gp",
                        "set terminal pngcairo size 900,500\nset output '" + png.string() +
                            "'\nset datafile separator ','\nset key top left\nset grid\n"
                            "set title 'Time per generated token (" +
                            Model::name() +
                            ")'\n"
                            "set xlabel 'generation step'\nset ylabel 'ms'\n"
                            "plot '" +
                            csv.string() +
                            "' every ::1 using 1:3 with linespoints title 'no cache', "
                            "'' every ::1 using 1:4 with linespoints title 'KV cache'\n");
  std::printf("wrote %s and %s\n", csv.c_str(), png.c_str());
  // The cache is an optimisation: any difference in tokens is a bug.
  return by_hand_cached == by_hand_plain && runs[0].ids() == runs[1].ids() ? 0 : 1;
}

int main(int argc, char** argv) {
  CLI::App app{"Lesson 1: the KV cache"};
  Args a;
  sk::examples::add_model_options(app, a.model, a.vocab);
  app.add_option("--prompt", a.prompt);
  app.add_option("--tokens", a.tokens, "tokens to generate")->check(CLI::Range(1, 512));
  app.add_option("--by-hand", a.by_hand, "steps of the loops written out by hand")
      ->check(CLI::Range(1, 64));
  app.add_option("--out", a.out, "output folder for the CSV and plot");
  CLI11_PARSE(app, argc, argv);
  return sk::examples::run_lesson(
      "01_kv_cache", a.model, a.vocab,
      [&]<class D>(std::type_identity<D>, const sk::text::Gpt2Tokenizer& tok) {
        return lesson<D>(a, tok);
      });
}
