// SPDX-License-Identifier: Apache-2.0
// Lesson 9: prefix caching.
//
// Chat turns, a shared system prompt, few-shot examples: serving traffic resends the same prompt
// prefix again and again, and without reuse every request computes its keys and values anew.
// A paged cache can share them: a full block of a sequence is named by its tokens (and the
// blocks before it, and the adapter), and a later request whose prompt starts the same way maps
// those blocks into its own block table instead of computing them. This example:
//   1. by hand, on the model and its paged cache: six questions behind one system prompt, each
//      mapping the longest cached run of its prompt's full blocks (map_prefix), computing only
//      the rest, and naming its own full blocks for the next ones (publish). Each request's
//      block table is printed as a picture (= a block shared from the cache, + one it computed),
//      and its logits are compared, bit for bit, with a whole prefill in a cache of its own;
//   2. through the serving engine, the same requests one after another with caching off and on:
//      each request's TTFT under both (prefix_caching.csv and .png) and the same tokens.
// Look at: in (1) how every request after the first computes only its question, and in (2) the
// TTFT of requests 2..6.
// With --model DIR it uses a Hugging Face GPT-2; without, a seeded random GPT-2 124M (same
// cost, meaningless text).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <bit>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/plot.hpp"
#include "common/run.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/engine.hpp"

namespace fs = std::filesystem;
namespace sk = servekit;
namespace serve = servekit::serve;

struct Args {
  std::string model, vocab, out = "out/09_prefix_caching";
  int tokens = 8;
};

const char* const kSystem =
    "You are the assistant of a small bakery in the old town. Answer questions about opening "
    "hours, prices and ingredients in one or two polite sentences. The bakery opens at seven, "
    "closes at six and bakes rye bread, croissants and apple pie every day. On Sundays it opens "
    "at eight and closes at noon. A loaf of rye bread costs four euros, a croissant one euro "
    "twenty and a slice of apple pie two euros fifty; a whole pie is twelve euros. The rye bread "
    "is made of rye flour, water, salt and sourdough, nothing else, so it is vegan. The "
    "croissants are made with butter and milk. The apple pie has apples from the valley, sugar, "
    "cinnamon, butter, flour and eggs. Cakes for birthdays and weddings are baked to order: ask "
    "two days ahead and say how many people it is for. Customers may pay in cash or by card.";
const char* const kQuestions[] = {"When do you open?",         "Is the rye bread vegan?",
                                  "How much is a croissant?",  "Do you bake on Sundays?",
                                  "What is in the apple pie?", "Can I order a birthday cake?"};

template <class Model>
int lesson(const Args& a, const sk::text::Gpt2Tokenizer& tok, Model& model) {
  constexpr int V = Model::Dims::vocab, P = Model::Dims::n_positions, B = Model::Cache::B;
  std::printf("composition: %s, blocks of %d tokens\n", Model::name().c_str(), B);
  auto ids_of = [&](const std::string& s) {
    auto ids = tok.encode(s);
    for (auto& t : ids) t %= V;  // test-sized models have a smaller vocabulary
    return ids;
  };
  // The system prompt, cut so that it, a question and the answer fit the context.
  auto system = ids_of(kSystem);
  system.resize(std::min<std::size_t>(system.size(), (P - a.tokens) / 2));
  std::vector<std::vector<int32_t>> prompts;
  for (const char* q : kQuestions) {
    auto p = system;
    const auto ids = ids_of(std::string(" ") + q);
    p.insert(p.end(), ids.begin(), ids.end());
    prompts.push_back(p);
  }
  std::printf("system prompt: %zu tokens (%zu full blocks); %zu questions after it\n",
              system.size(), system.size() / B, prompts.size());

  // 1. By hand: map, compute the rest, publish; the block table as a picture.
  std::printf("\n== 1. one paged cache, prefix caching by hand (= shared block, + computed)\n");
  auto cache = model.make_cache(static_cast<int>(prompts.size()), P);
  cache.enable_prefix_cache();
  bool same = true;
  std::vector<float> logits, whole;
  for (std::size_t i = 0; i < prompts.size(); i++) {
    const auto& p = prompts[i];
    const int n = static_cast<int>(p.size());
    const int slot = cache.acquire();
    // The last token is always computed: its logits pick the first new token.
    const int hit = cache.map_prefix(slot, p, /*adapter key*/ 0, n - 1);
    const sk::model::SeqStep s{slot, hit, n - hit};
    model.forward(cache, {std::span(p).subspan(hit), std::span(&s, 1)}, logits);
    cache.publish(slot, p, 0);
    std::printf("request %zu (%3d tokens): [", i + 1, n);
    const auto table = cache.block_table(slot);
    for (std::size_t j = 0; j < table.size(); j++)
      std::printf("%s%3d%s", j ? " " : "", table[j], static_cast<int>(j) < hit / B ? "=" : "+");
    std::printf("]  reused %3d, computed %3d\n", hit, n - hit);
    // The same prompt whole, in a cache of its own: the same logits, bit for bit.
    auto alone = model.make_cache(1, P);
    const sk::model::SeqStep w{0, 0, n};
    model.forward(alone, {p, std::span(&w, 1)}, whole);
    same &= std::equal(logits.begin(), logits.end(), whole.begin(), [](float x, float y) {
      return std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y);
    });
  }
  std::printf("same logits as a whole prefill without the cache: %s\n", same ? "yes" : "NO");
  std::printf("blocks: %d in the pool, %d named in the prefix cache\n", cache.n_blocks(),
              cache.cached_blocks());

  // 2. Through the engine, one request after another, caching off and on.
  std::printf("\n== 2. the serving engine, requests one after another: TTFT off vs on\n");
  std::vector<serve::Result> got[2];
  for (int on : {0, 1}) {
    serve::EngineOptions opt{.max_batch = 4};
    opt.prefix_caching = on;
    serve::Engine<Model, serve::sched::Continuous> engine(model, tok, opt);
    for (const auto& p : prompts) {
      serve::Request r;
      r.prompt_ids = p;
      r.stop = {.max_new_tokens = a.tokens, .stop_at_eos = false};
      got[on].push_back(engine.generate(std::move(r)));
    }
  }
  std::printf("%8s %7s %14s %14s %8s %12s\n", "request", "prompt", "TTFT off (ms)", "TTFT on (ms)",
              "cached", "same tokens");
  fs::create_directories(a.out);
  const fs::path csv = fs::path(a.out) / "prefix_caching.csv";
  std::ofstream f(csv);
  f << "request,prompt_tokens,cached_tokens,ttft_off_ms,ttft_on_ms\n";
  bool same_tokens = true;
  for (std::size_t i = 0; i < prompts.size(); i++) {
    const auto &off = got[0][i], &on = got[1][i];
    const bool eq = off.ids() == on.ids();
    same_tokens &= eq;
    std::printf("%8zu %7d %14.1f %14.1f %8d %12s\n", i + 1, off.metrics.prompt_tokens,
                off.metrics.ttft_ms, on.metrics.ttft_ms, on.metrics.cached_tokens,
                eq ? "yes" : "NO");
    f << i + 1 << ',' << off.metrics.prompt_tokens << ',' << on.metrics.cached_tokens << ','
      << off.metrics.ttft_ms << ',' << on.metrics.ttft_ms << '\n';
  }
  f.close();
  sk::examples::gnuplot(
      fs::path(a.out) / "prefix_caching.gp",
      "set terminal pngcairo size 800,450\nset output '" +
          (fs::path(a.out) / "prefix_caching.png").string() +
          "'\nset datafile separator ','\nset key top right\nset grid y\nset style data "
          "histogram\nset style fill solid 0.8\nset title 'TTFT per request, prefix caching off "
          "and on (" +
          Model::name() +
          ")'\nset xlabel 'request'\nset ylabel 'TTFT (ms)'\nset yrange [0:*]\n"
          "plot '" +
          csv.string() +
          "' every ::1 using 4:xtic(1) title 'off' lc rgb '#d62728', '' every ::1 using 5 "
          "title 'on' lc rgb '#1f77b4'\n");
  std::printf("written: %s (+ .png)\n", csv.c_str());
  return same && same_tokens ? 0 : 1;
}

int main(int argc, char** argv) {
  CLI::App app{"Lesson 9: prefix caching"};
  Args a;
  sk::examples::add_model_options(app, a.model, a.vocab);
  app.add_option("--tokens", a.tokens, "tokens generated per request")->check(CLI::Range(1, 500));
  app.add_option("--out", a.out, "folder for the CSV and the plot");
  CLI11_PARSE(app, argc, argv);
  return sk::examples::run_lesson(
      "09_prefix_caching", a.model, a.vocab,
      [&]<class D>(std::type_identity<D>, const sk::text::Gpt2Tokenizer& tok) {
        using Model = sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Paged<16>>>;
        std::printf("loading %s ...\n",
                    a.model.empty() ? "random GPT-2 124M (seed 0)" : a.model.c_str());
        auto model = a.model.empty() ? Model::random(0) : Model::load(a.model);
        return lesson(a, tok, model);
      });
}
