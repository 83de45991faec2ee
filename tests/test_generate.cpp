// SPDX-License-Identifier: Apache-2.0
// Generation: HF's greedy continuations with and without the cache, stop rules, streaming,
// seeded sampling.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "servekit/model/gpt2.hpp"
#include "servekit/serve/generate.hpp"
#include "support/reference.hpp"
#include "support/vocab_prefix.hpp"

namespace sk = servekit;
using D = sk::dims::TinyA;
using Model = sk::Gpt2<sk::Config<D>>;

namespace {
const sk::text::Gpt2Tokenizer& tokenizer() {
  static auto tok =
      sk::text::Gpt2Tokenizer::from_dir(std::filesystem::path(SERVEKIT_DATA) / "gpt2");
  return tok;
}
const std::filesystem::path kDir = std::filesystem::path(SERVEKIT_FIXTURES) / "tiny-a";
}  // namespace

TEST_CASE("greedy generation reproduces HF's continuations, with and without the KV cache") {
  auto model = Model::load(kDir);
  auto ref = sk::test::load_reference(kDir);
  for (bool cache : {true, false}) {
    for (const auto& c : ref.cases) {
      INFO("case " << c.name << (cache ? " with" : " without") << " cache");
      sk::serve::GenerateOptions opt;
      opt.use_cache = cache;
      opt.stop.max_new_tokens = static_cast<int>(c.greedy_ids.size());
      auto r = sk::serve::generate(model, tokenizer(), c.prompt_ids, opt);
      CHECK(r.ids() == c.greedy_ids);
      CHECK(r.finish_reason == "length");
    }
  }
}

TEST_CASE("stop rules: max_new_tokens, EOS and stop strings; streamed pieces add up to the text") {
  auto model = Model::load(kDir);
  std::vector<int32_t> prompt{46, 206, 75, 218};
  sk::serve::GenerateOptions opt;
  opt.stop.max_new_tokens = 12;
  auto base = sk::serve::generate(model, tokenizer(), prompt, opt);
  REQUIRE(base.tokens.size() == 12);

  SECTION("EOS ends generation and is the last token") {
    opt.stop.eos_id = base.tokens[4].id;
    std::vector<int32_t> ids;
    auto r = sk::serve::generate(model, tokenizer(), prompt, opt,
                                 [&](std::string_view, const sk::serve::GeneratedToken& t) {
                                   ids.push_back(t.id);
                                   return true;
                                 });
    CHECK(r.finish_reason == "eos");
    CHECK(ids == r.ids());  // the end-of-text token is streamed too
    CHECK(r.tokens.back().ends);
    // The first occurrence of that id ends it.
    std::size_t first = 0;
    while (base.tokens[first].id != opt.stop.eos_id) first++;
    CHECK(r.tokens.size() == first + 1);
  }
  SECTION("a stop string that spans tokens cuts the text before it") {
    const std::string full = base.text;
    REQUIRE(full.size() > 6);
    const std::string stop = full.substr(full.size() / 2, 3);
    const std::size_t at = full.find(stop);
    opt.stop.stop_strings = {stop};
    std::string streamed;
    std::vector<int32_t> ids;  // one call per token, held-back text or not
    std::vector<bool> ends;    // the token that completes the stop string says it ends
    auto r = sk::serve::generate(model, tokenizer(), prompt, opt,
                                 [&](std::string_view piece, const sk::serve::GeneratedToken& t) {
                                   streamed += piece;
                                   ids.push_back(t.id);
                                   ends.push_back(t.ends);
                                   return true;
                                 });
    REQUIRE(!ends.empty());
    CHECK(ends.back());
    CHECK(std::count(ends.begin(), ends.end(), true) == 1);
    CHECK(r.finish_reason == "stop");
    CHECK(r.text == full.substr(0, at));
    CHECK(streamed == r.text);
    CHECK(ids == r.ids());
  }
  SECTION("streaming without stop strings delivers the whole text") {
    std::string streamed;
    int calls = 0;
    auto r =
        sk::serve::generate(model, tokenizer(), prompt, opt, [&](std::string_view piece, auto&) {
          streamed += piece;
          calls++;
          return true;
        });
    CHECK(streamed == r.text);
    CHECK(r.text == base.text);
    CHECK(calls == static_cast<int>(r.tokens.size()));
  }
  SECTION("the callback can cancel") {
    int calls = 0;
    auto r = sk::serve::generate(model, tokenizer(), prompt, opt,
                                 [&](std::string_view, auto&) { return ++calls < 2; });
    CHECK(r.finish_reason == "cancelled");
    CHECK(r.tokens.size() < 12);
  }
}

TEST_CASE("sampling is seeded and honours top-k and top-p") {
  auto model = Model::load(kDir);
  std::vector<int32_t> prompt{46, 206, 75};
  sk::serve::GenerateOptions opt;
  opt.stop.max_new_tokens = 16;
  opt.sampling = {.temperature = 1.5f, .top_k = 0, .top_p = 1.f, .seed = 42};
  auto a = sk::serve::generate(model, tokenizer(), prompt, opt);
  auto b = sk::serve::generate(model, tokenizer(), prompt, opt);
  CHECK(a.ids() == b.ids());
  opt.sampling.seed = 43;
  auto c = sk::serve::generate(model, tokenizer(), prompt, opt);
  CHECK(a.ids() != c.ids());

  sk::serve::GenerateOptions greedy;
  greedy.stop.max_new_tokens = 16;
  auto g = sk::serve::generate(model, tokenizer(), prompt, greedy);
  opt.sampling.top_k = 1;  // only the argmax survives
  CHECK(sk::serve::generate(model, tokenizer(), prompt, opt).ids() == g.ids());
  opt.sampling.top_k = 0;
  opt.sampling.top_p = 1e-6f;  // the smallest nucleus is the argmax alone
  CHECK(sk::serve::generate(model, tokenizer(), prompt, opt).ids() == g.ids());
}

TEST_CASE("the sampler's frequencies follow the filtered distribution") {
  // logits for p = (0.5, 0.3, 0.15, 0.05)
  std::vector<float> logits{std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  sk::serve::Sampler sampler;
  const sk::serve::SamplingParams top2{.temperature = 1.f, .top_k = 2, .top_p = 1.f, .seed = 1};
  std::map<int, int> n;
  for (int i = 0; i < 20000; i++) n[sampler(logits, top2, i)]++;
  CHECK(n[2] + n[3] == 0);
  CHECK(n[0] / 20000.0 == Approx(0.5 / 0.8).margin(0.02));

  const sk::serve::SamplingParams nucleus{.temperature = 1.f, .top_k = 0, .top_p = 0.9f, .seed = 2};
  n.clear();
  for (int i = 0; i < 20000; i++) n[sampler(logits, nucleus, i)]++;
  CHECK(n[3] == 0);  // 0.5 + 0.3 + 0.15 reaches 0.9 without the last token
  CHECK(n[2] / 20000.0 == Approx(0.15 / 0.95).margin(0.02));
}

TEST_CASE("top logprobs are sorted, normalised and start with the greedy token") {
  auto model = Model::load(kDir);
  std::vector<int32_t> prompt{46, 206};
  sk::serve::GenerateOptions opt;
  opt.stop.max_new_tokens = 4;
  opt.top_logprobs = 5;
  auto r = sk::serve::generate(model, tokenizer(), prompt, opt);
  for (const auto& t : r.tokens) {
    REQUIRE(t.top.size() == 5);
    CHECK(t.top[0].id == t.id);
    CHECK(t.top[0].logprob == Approx(t.logprob));
    double mass = 0;
    for (std::size_t i = 0; i < t.top.size(); i++) {
      mass += std::exp(t.top[i].logprob);
      if (i) CHECK(t.top[i].logprob <= t.top[i - 1].logprob);
    }
    CHECK(mass <= 1.0 + 1e-5);
  }
}

TEST_CASE("the sampler never picks outside the top of a finite distribution") {
  sk::serve::Sampler sampler;
  // Token 2 is by far the likeliest; NaNs must not pull the draw to the last candidate.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> logits{0.f, nan, 20.f, -1.f, nan};
  for (float t : {1e-38f, 1e-6f, 0.7f})
    for (int i = 0; i < 200; i++) {
      const sk::serve::SamplingParams p{.temperature = t, .top_k = 0, .top_p = 0.9f, .seed = 5};
      INFO("temperature " << t << " draw " << i);
      REQUIRE(sampler(logits, p, i) == 2);
    }
  CHECK(sk::serve::argmax(logits) == 2);
  // No number to draw from: an error, never a silent token 0.
  std::vector<float> none{nan, -INFINITY, nan};
  CHECK_THROWS_WITH(sampler(none, {.temperature = 1.f}, 0),
                    Catch::Contains("every one of the 3 logits is NaN or -inf"));
  CHECK_THROWS_WITH(sk::serve::argmax(none), Catch::Contains("NaN or -inf"));
  // +inf takes all the mass.
  std::vector<float> inf{1.f, INFINITY, 3.f};
  CHECK(sampler(inf, {.temperature = 1.f}, 0) == 1);
}

TEST_CASE("a request's n-th draw is keyed by (seed, n), not by how many draws came before") {
  sk::serve::Sampler a, b;
  std::vector<float> logits(50);
  for (int i = 0; i < 50; i++) logits[i] = std::sin(i * 0.7f);
  const sk::serve::SamplingParams p{.temperature = 1.f, .seed = 123};
  std::vector<int32_t> seq;
  for (int n = 0; n < 20; n++) seq.push_back(a(logits, p, n));
  for (int n = 19; n >= 0; n--) CHECK(b(logits, p, n) == seq[n]);
}

TEST_CASE("a tokenizer with fewer tokens than the model is refused before anything runs") {
  auto model = Model::load(kDir);
  const auto dir = std::filesystem::temp_directory_path() /
                   ("servekit_generate_small_vocab_" + std::to_string(::getpid()));
  sk::testing::write_gpt2_vocab_prefix(std::filesystem::path(SERVEKIT_DATA) / "gpt2", dir, 300);
  const auto small = sk::text::Gpt2Tokenizer::from_dir(dir);
  REQUIRE(small.vocab_size() == 300);
  const std::vector<int32_t> prompt{1, 2};
  sk::serve::GenerateOptions opt;
  int streamed = 0;
  REQUIRE_THROWS_WITH(sk::serve::generate(model, small, prompt, opt,
                                          [&](std::string_view, const sk::serve::GeneratedToken&) {
                                            ++streamed;
                                            return true;
                                          }),
                      Catch::Contains("generate") &&
                          Catch::Contains((dir / "vocab.json").string()) &&
                          Catch::Contains("has 300 tokens") &&
                          Catch::Contains("vocab_size is 512") && Catch::Contains("ids 300..511"));
  CHECK(streamed == 0);
  // The model's own size or more is fine: tiny models share GPT-2's 50257 tokens.
  CHECK_NOTHROW(sk::serve::generate(model, tokenizer(), prompt, opt));
  std::filesystem::remove_all(dir);
}
