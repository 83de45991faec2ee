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
#include <CLI/CLI.hpp>
#include <algorithm>
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
  int tokens = 40;
};

template <class D>
int lesson(const Args& a, const sk::text::Gpt2Tokenizer& tok) {
  using Model =
      sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Contiguous, sk::lora::None, Backend>>;
  std::printf("loading %s ...\n", a.model.empty() ? "random GPT-2 124M (seed 0)" : a.model.c_str());
  auto model = a.model.empty() ? Model::random(0) : Model::load(a.model);
  std::printf("composition: %s\n\n", Model::name().c_str());
  auto prompt = tok.encode(a.prompt);

  // 1. One forward pass over the prompt: the distribution of the next token.
  auto cache = model.make_cache(1);
  std::vector<float> logits, logp;
  sk::model::SeqStep s{0, 0, static_cast<int32_t>(prompt.size())};
  model.forward(cache, {prompt, std::span(&s, 1), sk::model::Logits::Last}, logits);
  sk::serve::log_softmax(logits, logp);
  std::vector<int> idx(logp.size());
  for (std::size_t i = 0; i < idx.size(); i++) idx[i] = static_cast<int>(i);
  std::partial_sort(idx.begin(), idx.begin() + 10, idx.end(),
                    [&](int x, int y) { return logp[x] > logp[y]; });
  std::printf("prompt: \"%s\" (%zu tokens)\ntop-10 next tokens:\n", a.prompt.c_str(),
              prompt.size());
  for (int i = 0; i < 10; i++)
    std::printf("  %2d. %-16s id %5d  p = %.4f\n", i + 1,
                ("\"" + tok.token_bytes(idx[i]) + "\"").c_str(), idx[i], std::exp(logp[idx[i]]));

  // 2. The same greedy continuation, without then with the cache.
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

  // 3. CSV + plot.
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
  return 0;
}

int main(int argc, char** argv) {
  CLI::App app{"Lesson 1: the KV cache"};
  Args a;
  sk::examples::add_model_options(app, a.model, a.vocab);
  app.add_option("--prompt", a.prompt);
  app.add_option("--tokens", a.tokens, "tokens to generate")->check(CLI::Range(1, 512));
  app.add_option("--out", a.out, "output folder for the CSV and plot");
  CLI11_PARSE(app, argc, argv);
  return sk::examples::run_lesson(
      "01_kv_cache", a.model, a.vocab,
      [&]<class D>(std::type_identity<D>, const sk::text::Gpt2Tokenizer& tok) {
        return lesson<D>(a, tok);
      });
}
