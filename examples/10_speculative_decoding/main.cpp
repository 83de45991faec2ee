// SPDX-License-Identifier: Apache-2.0
// Lesson 10: speculative decoding.
//
// A decode step reads every weight of the model to compute one row per sequence; at a small
// batch a few more rows cost little beside those reads. Speculation spends them: guess the next
// k tokens, feed them in the same step after the sequence's own token, and get a row of logits
// after each guess. If the token drawn from the first row is the first guess, the second row
// is already the next position's logits, and so on: one step can yield up to k + 1 tokens. The
// guesses here come from prompt lookup (n-gram): text that repeats itself (quotes, code, lists,
// a loop a model falls into) is continued by copying what followed its last occurrence.
// This example:
//   1. by hand, on the model and its cache: each step's proposal, the token drawn from each row,
//      the verdict per position, the rows thrown away (the rollback: they lie past the cache's
//      length and the next step writes over them), and at the end the tokens compared with
//      plain greedy decoding, one step per token;
//   2. through the serving engine, plain and speculative: tokens/s and acceptance;
//   3. (1) with a draft model's guesses: a model with the target's embeddings and its first
//      quarter of layers (layer-skipping self-speculation), greedy, with a cache of its own that
//      is rolled back too, by hand and then through the engine (serve/draft_model.hpp).
// (1)'s tokens per step go to speculative.csv and .png.
// Look at: in (1) the steps that yield several tokens and the equal tokens at the end; in (2)
// the speedup beside the acceptance.
// With --model DIR it uses a Hugging Face GPT-2; without, a seeded random GPT-2 124M (same
// cost, meaningless text, and loops that make guesses easy).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>

#include "common/plot.hpp"
#include "common/run.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/engine.hpp"
#include "servekit/serve/generate.hpp"

namespace fs = std::filesystem;
namespace sk = servekit;
namespace serve = servekit::serve;

struct Args {
  std::string model, vocab, out = "out/10_speculative_decoding";
  int tokens = 48, k = 4;
};

const char* const kPrompt =
    "Roses are red, violets are blue, sugar is sweet, and so are you. Roses are red, violets are "
    "blue, sugar is sweet, and so are";

// What a by-hand run gave: the generated tokens, its steps, each step's proposed and
// accepted tokens.
struct Verified {
  std::vector<int32_t> ids;
  int steps = 0;
  std::vector<std::pair<int, int>> log;
};

// Greedy decoding by hand on the model and its cache, a step per verify: propose(text, k, out)
// guesses up to k tokens after text; one forward feeds the last token and the guesses with a
// row of logits after each; the tokens drawn are kept while they equal the guesses; the rows
// after the first mismatch are rolled back (they lie past the cache's length and the next step
// writes over them). on_verified(text) shows the proposer the text after the verify.
template <class Model, class Propose, class OnVerified>
Verified by_hand(Model& model, const std::vector<int32_t>& prompt, const Args& a, Propose&& propose,
                 OnVerified&& on_verified) {
  constexpr int V = Model::Dims::vocab, P = Model::Dims::n_positions;
  const int n = static_cast<int>(prompt.size());
  auto cache = model.make_cache(1, P);
  std::vector<float> logits;
  std::vector<int32_t> text = prompt;  // prompt + generated; the last token is not cached yet
  {
    const sk::model::SeqStep s{0, 0, n - 1};
    if (n > 1) model.forward(cache, {std::span(prompt).first(n - 1), std::span(&s, 1)}, logits);
  }
  int n_cached = n - 1, generated = 0;
  Verified out;
  std::vector<int32_t> draft, fed;
  while (generated < a.tokens) {
    const int k = std::min(a.k, a.tokens - generated - 1);
    propose(std::span<const int32_t>(text), k, draft);
    const int d = static_cast<int>(draft.size());
    // One step: the last token, then the proposal; a row of logits after each.
    fed.assign(1, text.back());
    fed.insert(fed.end(), draft.begin(), draft.end());
    const sk::model::SeqStep s{0, n_cached, 1 + d, 0, 1 + d};
    model.forward(cache, {fed, std::span(&s, 1)}, logits);
    out.steps++;
    std::printf("step %2d at position %3d, proposed [", out.steps, n_cached + 1);
    for (int j = 0; j < d; j++) std::printf("%s%d", j ? " " : "", draft[j]);
    std::printf("]\n    drew:");
    int accepted = 0;
    for (int j = 0; j <= d; j++) {
      const int32_t x = serve::argmax(std::span(logits).subspan(std::size_t(j) * V, V));
      text.push_back(x);
      generated++;
      const bool match = j < d && x == draft[j];
      std::printf(" %d%s", x, j == d ? " (the row after the last proposal)" : match ? " =" : " x");
      if (!match) break;
      accepted++;
    }
    n_cached += accepted + 1;  // its own token and the accepted proposals are in the cache
    out.log.push_back({d, accepted});
    if (d - accepted > 0)
      std::printf("\n    %d token(s) this step; rolled back: %d row(s) past the cache's length\n",
                  accepted + 1, d - accepted);
    else
      std::printf("\n    %d token(s) this step\n", accepted + 1);
    on_verified(std::span<const int32_t>(text));
  }
  out.ids.assign(text.begin() + n, text.end());
  return out;
}

// A draft by hand: the target's embeddings and first layers (layer-skipping self-speculation:
// no second checkpoint needed), greedy, with a cache of its own. It remembers how many of the
// text's tokens its cache holds; after a verify, the rows past the kept text are rolled back.
template <class Draft>
struct HandDraft {
  Draft& model;
  typename Draft::Cache cache = model.make_cache(1, Draft::Dims::n_positions);
  std::vector<float> logits;
  std::vector<int32_t> fed;  // the tokens whose keys and values its cache holds

  void propose(std::span<const int32_t> text, int k, std::vector<int32_t>& out) {
    out.clear();
    if (k <= 0) return;
    const std::size_t have = fed.size();
    std::vector<int32_t> next(text.begin() + have, text.end());  // catch-up: what it has not seen
    std::printf("    draft: catch-up of %zu token(s), then", next.size());
    for (int j = 0; j < k; j++) {
      const sk::model::SeqStep s{0, static_cast<int32_t>(fed.size()),
                                 static_cast<int32_t>(next.size())};
      model.forward(cache, {next, std::span(&s, 1)}, logits);
      fed.insert(fed.end(), next.begin(), next.end());
      out.push_back(serve::argmax(std::span<const float>(logits)));
      next.assign(1, out.back());
    }
    std::printf(" %d decode step(s)\n", k - 1);
  }
  // After a verify: keep the rows of the tokens the text has (its last is fed next time).
  void verified(std::span<const int32_t> text) {
    std::size_t keep = 0;
    while (keep < fed.size() && keep + 1 < text.size() && fed[keep] == text[keep]) keep++;
    if (keep < fed.size())
      std::printf("    draft: rolled back %zu row(s) of its cache\n", fed.size() - keep);
    fed.resize(keep);
  }
};

template <class Model, class Draft>
int lesson(const Args& a, const sk::text::Gpt2Tokenizer& tok, Model& model, Draft& draft_model) {
  constexpr int V = Model::Dims::vocab, P = Model::Dims::n_positions;
  std::printf("composition: %s, k = %d proposed tokens at most per step\n", Model::name().c_str(),
              a.k);
  auto prompt = tok.encode(kPrompt);
  for (auto& t : prompt) t %= V;  // test-sized models have a smaller vocabulary
  prompt.resize(std::min<std::size_t>(prompt.size(), P - a.tokens));
  const int n = static_cast<int>(prompt.size());

  // Plain greedy decoding, the reference: one step per token.
  const serve::Result plain = serve::generate(
      model, tok, prompt, {.stop = {.max_new_tokens = a.tokens, .stop_at_eos = false}});

  // 1. By hand, with n-gram proposals; 3. with a draft model's.
  std::printf("\n== 1. by hand, n-gram proposals: %d-token prompt, %d new tokens, greedy\n", n,
              a.tokens);
  const serve::Speculation sp{.k = a.k};
  const Verified by_ngram = by_hand(
      model, prompt, a,
      [&](std::span<const int32_t> text, int k, std::vector<int32_t>& draft) {
        serve::propose_ngram(text, sp, k, draft);
      },
      [](std::span<const int32_t>) {});
  const bool same = by_ngram.ids == plain.ids();
  std::printf("%d tokens in %d steps (plain decoding: %d steps)\n", a.tokens, by_ngram.steps,
              a.tokens);
  std::printf("same tokens as plain decoding: %s\n", same ? "yes" : "NO");
  const auto& log = by_ngram.log;

  // 2. The engine, plain and speculative: the same requests, tokens/s and acceptance.
  std::printf("\n== 2. the serving engine, speculation off and on\n");
  serve::Request r;
  r.prompt_ids = prompt;
  r.stop = {.max_new_tokens = a.tokens, .stop_at_eos = false};
  serve::Result got[2];
  serve::EngineStats stats[2];
  for (int on : {0, 1}) {
    serve::EngineOptions opt{.max_batch = 1, .speculative = {.k = on ? a.k : 0}};
    serve::Engine<Model, serve::sched::Continuous> engine(model, tok, opt);
    got[on] = engine.generate(r);
    stats[on] = engine.stats();
  }
  auto rate = [](const serve::Result& x) {
    return (x.tokens.size() - 1) / ((x.metrics.e2e_ms - x.metrics.ttft_ms) / 1e3);
  };
  std::printf("%6s %8s %12s %10s %10s\n", "", "steps", "decode tok/s", "proposed", "accepted");
  for (int on : {0, 1})
    std::printf("%6s %8ld %12.1f %10ld %10ld\n", on ? "ngram" : "plain", stats[on].steps,
                rate(got[on]), stats[on].spec_proposed, stats[on].spec_accepted);
  const bool same_engine = got[0].ids() == got[1].ids() && got[1].ids() == plain.ids();
  std::printf("speedup %.2fx at acceptance %.2f; same tokens: %s\n", rate(got[1]) / rate(got[0]),
              stats[1].spec_acceptance(), same_engine ? "yes" : "NO");

  // 3. A draft model proposes: by hand, then through the engine (serve/draft_model.hpp).
  std::printf(
      "\n== 3. by hand, a draft model's proposals (%s: the target's embeddings and first "
      "%d of %d layers)\n",
      Draft::name().c_str(), Draft::Dims::n_layer, Model::Dims::n_layer);
  HandDraft<Draft> hd{draft_model};
  const Verified by_draft = by_hand(
      model, prompt, a,
      [&](std::span<const int32_t> text, int k, std::vector<int32_t>& out) {
        hd.propose(text, k, out);
      },
      [&](std::span<const int32_t> text) { hd.verified(text); });
  long proposed = 0, accepted = 0;
  for (auto [d, acc] : by_draft.log) proposed += d, accepted += acc;
  const bool same_draft = by_draft.ids == plain.ids();
  std::printf(
      "%d tokens in %d steps, %ld of %ld proposals accepted; same tokens as plain "
      "decoding: %s\n",
      a.tokens, by_draft.steps, accepted, proposed, same_draft ? "yes" : "NO");
  serve::Result drafted;
  serve::EngineStats drafted_stats;
  {
    serve::EngineOptions opt{.max_batch = 1, .speculative = {.k = a.k}};
    opt.speculative.draft = std::make_shared<serve::DraftModel<Draft>>(draft_model, 1);
    serve::Engine<Model, serve::sched::Continuous> engine(model, tok, opt);
    drafted = engine.generate(r);
    drafted_stats = engine.stats();
  }
  const bool same_drafted = drafted.ids() == plain.ids();
  std::printf(
      "the engine with the draft: %ld steps, %.1f decode tok/s (plain %.1f), acceptance "
      "%.2f; same tokens: %s\n",
      drafted_stats.steps, rate(drafted), rate(got[0]), drafted_stats.spec_acceptance(),
      same_drafted ? "yes" : "NO");

  // Tokens per step, from (1).
  fs::create_directories(a.out);
  const fs::path csv = fs::path(a.out) / "speculative.csv";
  {
    std::ofstream f(csv);
    f << "step,proposed,accepted,tokens\n";
    for (std::size_t i = 0; i < log.size(); i++)
      f << i + 1 << ',' << log[i].first << ',' << log[i].second << ',' << log[i].second + 1 << '\n';
  }
  sk::examples::gnuplot(
      fs::path(a.out) / "speculative.gp",
      "set terminal pngcairo size 800,450\nset output '" +
          (fs::path(a.out) / "speculative.png").string() +
          "'\nset datafile separator ','\nset key top right\nset grid y\nset style fill solid "
          "0.8\nset title 'tokens per step, speculative (by hand, " +
          Model::name() + ")'\nset xlabel 'step'\nset ylabel 'tokens'\nset yrange [0:*]\nplot '" +
          csv.string() +
          "' every ::1 using 1:4 with boxes title 'speculative: accepted + 1', '' every ::1 using "
          "1:2 with points pt 7 title 'proposed', 1 with lines lw 2 title 'plain decoding'\n");
  std::printf("written: %s (+ .png)\n", csv.c_str());
  return same && same_engine && same_draft && same_drafted ? 0 : 1;
}

int main(int argc, char** argv) {
  CLI::App app{"Lesson 10: speculative decoding"};
  Args a;
  sk::examples::add_model_options(app, a.model, a.vocab);
  app.add_option("--tokens", a.tokens, "tokens generated")->check(CLI::Range(1, 500));
  app.add_option("--k", a.k, "proposed tokens per step at most")->check(CLI::Range(1, 16));
  app.add_option("--out", a.out, "folder for the CSV and the plot");
  CLI11_PARSE(app, argc, argv);
  return sk::examples::run_lesson(
      "10_speculative_decoding", a.model, a.vocab,
      [&]<class D>(std::type_identity<D>, const sk::text::Gpt2Tokenizer& tok) {
        using Model = sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Contiguous>>;
        // The draft: the same embeddings and the first quarter of the layers.
        using DraftDims = sk::dims::Tiny<std::max(1, D::n_layer / 4), D::n_head, D::n_embd,
                                         D::vocab, D::n_positions>;
        using Draft = sk::Gpt2<sk::Config<DraftDims>>;
        std::printf("loading %s ...\n",
                    a.model.empty() ? "random GPT-2 124M (seed 0)" : a.model.c_str());
        auto tensors =
            a.model.empty() ? sk::model::random_gpt2<D>(0) : sk::model::load_gpt2<D>(a.model);
        auto first = tensors;
        first.layers.resize(DraftDims::n_layer);
        first.config.n_layer = DraftDims::n_layer;
        Model model(std::move(tensors));
        Draft draft(std::move(first));
        return lesson(a, tok, model, draft);
      });
}
