// SPDX-License-Identifier: Apache-2.0
// Bad input to the decoder and to generation: each is a servekit::Error naming the value at
// fault, and the model keeps working afterwards.
#include <catch2/catch.hpp>

#include "servekit/model/gpt2.hpp"
#include "servekit/serve/generate.hpp"

namespace sk = servekit;
using Catch::Contains;
using sk::model::Logits;
using sk::model::SeqStep;
using D = sk::dims::TinyA;
using Model = sk::Gpt2<sk::Config<D>>;

TEST_CASE("forward rejects malformed batches with a message naming the value") {
  auto model = Model::random(7);
  auto cache = model.make_cache(2, 64);
  std::vector<float> logits;
  std::vector<int32_t> toks{1, 2, 3};

  SeqStep empty{0, 0, 0};
  REQUIRE_THROWS_WITH(model.forward(cache, {{}, std::span(&empty, 1), Logits::Last}, logits),
                      Contains("n_new = 0"));
  SeqStep s{0, 0, 3};
  std::vector<int32_t> bad{1, D::vocab, 3};
  REQUIRE_THROWS_WITH(model.forward(cache, {bad, std::span(&s, 1), Logits::Last}, logits),
                      Contains("token id 512 at index 1") && Contains("[0, 512)"));
  std::vector<int32_t> neg{1, -4, 3};
  REQUIRE_THROWS_WITH(model.forward(cache, {neg, std::span(&s, 1), Logits::Last}, logits),
                      Contains("token id -4"));
  SeqStep wrong_slot{5, 0, 3};
  REQUIRE_THROWS_WITH(model.forward(cache, {toks, std::span(&wrong_slot, 1), Logits::Last}, logits),
                      Contains("slot 5"));
  SeqStep too_long{0, 62, 3};  // cache max_len 64
  REQUIRE_THROWS_WITH(model.forward(cache, {toks, std::span(&too_long, 1), Logits::Last}, logits),
                      Contains("65 tokens") && Contains("max_len = 64"));
  SeqStep count{0, 0, 2};
  REQUIRE_THROWS_WITH(model.forward(cache, {toks, std::span(&count, 1), Logits::Last}, logits),
                      Contains("hold 2 new tokens") && Contains("has 3"));

  auto big = model.make_cache(1);
  std::vector<int32_t> over(D::n_positions + 1, 1);
  SeqStep o{0, 0, static_cast<int32_t>(over.size())};
  REQUIRE_THROWS_WITH(model.forward(big, {over, std::span(&o, 1), Logits::Last}, logits),
                      Contains("n_positions = 128"));
  REQUIRE_THROWS_WITH(model.make_cache(1, D::n_positions + 1), Contains("exceeds n_positions 128"));

  // Nothing above broke the model: a valid step still runs.
  REQUIRE_NOTHROW(model.forward(cache, {toks, std::span(&s, 1), Logits::Last}, logits));
  REQUIRE(logits.size() == static_cast<std::size_t>(D::vocab));
}

TEST_CASE("an exhausted cache is an error, and released slots come back") {
  auto model = Model::random(7);
  auto cache = model.make_cache(2, 16);
  int a = cache.acquire(), b = cache.acquire();
  REQUIRE(a != b);
  REQUIRE_THROWS_WITH(cache.acquire(), Contains("all 2 slots are in use"));
  cache.release(a);
  REQUIRE(cache.acquire() == a);
  REQUIRE_THROWS_WITH(cache.release(9), Contains("slot 9"));
}

TEST_CASE("generate rejects an empty or over-long prompt and bad sampling parameters") {
  auto model = Model::random(7);
  auto tok = sk::text::Gpt2Tokenizer::from_dir(std::filesystem::path(SERVEKIT_DATA) / "gpt2");
  sk::serve::GenerateOptions opt;
  std::vector<int32_t> none;
  REQUIRE_THROWS_WITH(sk::serve::generate(model, tok, none, opt), Contains("prompt is empty"));
  std::vector<int32_t> over(D::n_positions + 1, 3);
  REQUIRE_THROWS_WITH(sk::serve::generate(model, tok, over, opt),
                      Contains("129 tokens") && Contains("n_positions = 128"));
  std::vector<int32_t> p{1, 2};
  opt.sampling.temperature = -1;
  REQUIRE_THROWS_WITH(sk::serve::generate(model, tok, p, opt), Contains("temperature"));
  opt.sampling.temperature = 1;
  opt.sampling.top_p = 1.5f;
  REQUIRE_THROWS_WITH(sk::serve::generate(model, tok, p, opt), Contains("top_p"));
}

TEST_CASE("generation stops at the context length instead of running past n_positions") {
  auto model = Model::random(3);
  auto tok = sk::text::Gpt2Tokenizer::from_dir(std::filesystem::path(SERVEKIT_DATA) / "gpt2");
  std::vector<int32_t> p(D::n_positions - 2, 5);
  sk::serve::GenerateOptions opt;
  opt.stop.max_new_tokens = 10;
  opt.stop.stop_at_eos = false;
  auto r = sk::serve::generate(model, tok, p, opt);
  // 126 prompt tokens fill positions 0..125; tokens 1..3 are predicted from 126, 127, 128
  // positions, the third needs position 127 to be fed: 3 tokens, then the context is full.
  CHECK(r.finish_reason == "context");
  CHECK(r.tokens.size() == 3);
}

// Each policy axis has its own concept, so a policy in the wrong place of Config is refused
// where the user wrote it (a compile error naming the axis' concept), not deep in the loader.
namespace {
template <class... P>
concept Composes = requires {
  typename sk::Config<P...>;
};
}  // namespace

TEST_CASE("Config refuses a policy of another axis", "[model][errors]") {
  using sk::dims::Gpt2Small;
  // The course's mistake: an argument skipped, so the cache layout lands on the weights' place.
  STATIC_REQUIRE_FALSE(Composes<Gpt2Small, sk::kv::Paged<16>>);
  STATIC_REQUIRE(Composes<Gpt2Small, sk::weights::F32, sk::kv::Paged<16>>);
  STATIC_REQUIRE_FALSE(Composes<Gpt2Small, sk::weights::F32, sk::lora::Gathered>);
  STATIC_REQUIRE_FALSE(
      Composes<Gpt2Small, sk::weights::F32, sk::kv::Contiguous, sk::backend::Host>);
  STATIC_REQUIRE_FALSE(
      Composes<Gpt2Small, sk::weights::F32, sk::kv::Contiguous, sk::lora::None, sk::lora::Loop>);
  STATIC_REQUIRE_FALSE(Composes<sk::weights::F16>);
  STATIC_REQUIRE(Composes<Gpt2Small, sk::weights::U8ZeroPoint<sk::weights::Group<64>>,
                          sk::kv::PagedF16<8>, sk::lora::Segmented, sk::backend::Emulated>);
  STATIC_REQUIRE_FALSE(sk::weights::WeightFormat<sk::kv::Contiguous>);
  STATIC_REQUIRE_FALSE(sk::kv::KvLayout<sk::weights::BF16>);
  STATIC_REQUIRE_FALSE(sk::lora::LoraDispatch<sk::backend::Cuda>);
  STATIC_REQUIRE_FALSE(sk::backend::Backend<sk::lora::None>);
}
