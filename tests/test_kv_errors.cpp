// SPDX-License-Identifier: Apache-2.0
// KV-cache capacity and bad input: sizes too small for one request, batches over capacity,
// an exhausted block pool (which must leave the cache as it was), policy names, and the
// capacity report's bytes, tokens, utilisation and waste.
#include <catch2/catch.hpp>

#include "kv_support.hpp"
#include "servekit/kv/block_allocator.hpp"
#include "servekit/serve/padded_batch.hpp"

namespace sk = servekit;
using Catch::Contains;
using sk::model::Logits;
using sk::model::SeqStep;
using D = sk::dims::TinyA;  // 2 layers, n_embd 64, n_positions 128
using Contig = sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Contiguous>>;
using Paged4 = sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Paged<4>>>;
using Paged4F16 = sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::PagedF16<4>>>;

TEST_CASE("kv policies have printable names") {
  CHECK(sk::kv::Contiguous::name == "contiguous");
  CHECK(sk::kv::ContiguousF16::name == "contiguous-f16");
  CHECK(sk::kv::Paged<16>::name == "paged16");
  CHECK(sk::kv::PagedF16<4>::name == "paged4-f16");
  CHECK(sk::kv::Paged<128>::name == "paged128");
  CHECK(Paged4F16::name() == "tiny-a/f32/paged4-f16/none/host");
}

TEST_CASE("a cache too small for one request is an error") {
  auto c = Contig::random(3);
  REQUIRE_THROWS_WITH(c.make_cache(0), Contains("slots must be >= 1, got 0"));
  REQUIRE_THROWS_WITH(c.make_cache(2, 0), Contains("max_len must be >= 1, got 0"));
  auto p = Paged4::random(3);
  REQUIRE_THROWS_WITH(p.make_cache(2, 16, 0), Contains("0 blocks of 4 tokens") &&
                                                  Contains("max_len = 16 needs (4 blocks)"));
  REQUIRE_THROWS_WITH(p.make_cache(2, 16, 3), Contains("hold 12 tokens, fewer than one sequence"));
  REQUIRE_THROWS_WITH(p.make_cache(2, D::n_positions + 1, 100),
                      Contains("exceeds n_positions 128"));
  REQUIRE_THROWS_WITH(p.make_cache(0, 16, 8), Contains("slots must be >= 1, got 0"));
  REQUIRE_NOTHROW(p.make_cache(2, 16, 4));
}

TEST_CASE("a batch over the cache's capacity is an error") {
  auto c = Contig::random(3);
  auto cache = c.make_cache(2, 16);
  std::vector<float> logits;
  std::vector<int32_t> toks(9, 1);
  std::vector<SeqStep> three{{0, 0, 3}, {1, 0, 3}, {2, 0, 3}};  // 3 sequences, 2 slots
  REQUIRE_THROWS_WITH(c.forward(cache, {toks, three, Logits::Last}, logits),
                      Contains("sequence 2 uses cache slot 2 outside [0, 2)"));
  std::vector<int32_t> long_toks(10, 1);
  SeqStep padded{0, 0, 10, 7};  // 7 pad rows + 10 tokens > max_len 16
  REQUIRE_THROWS_WITH(c.forward(cache, {long_toks, std::span(&padded, 1), Logits::Last}, logits),
                      Contains("would reach 17 tokens") && Contains("max_len = 16"));

  auto p = Paged4::random(3);
  auto pc = p.make_cache(2, 16, 4);  // room for 16 tokens in all
  std::vector<int32_t> t18(18, 1);
  std::vector<SeqStep> two{{0, 0, 9}, {1, 0, 9}};  // 3 + 3 blocks
  REQUIRE_THROWS_WITH(p.forward(pc, {t18, two, Logits::Last}, logits),
                      Contains("needs 6 more blocks of 4 tokens, 4 of 4 are free"));
  CHECK(pc.free_blocks() == 4);
  CHECK(pc.length(0) == 0);
  CHECK(pc.length(1) == 0);
}

TEST_CASE("an exhausted block pool fails the step and leaves the cache as it was") {
  auto model = Paged4::random(5);
  auto cache = model.make_cache(2, 16, 5);
  std::vector<float> logits, want;
  std::vector<int32_t> a(12), b(8, 2);
  for (int i = 0; i < 12; i++) a[i] = 3 * i + 1;
  SeqStep sa{0, 0, 12};
  model.forward(cache, {a, std::span(&sa, 1), Logits::Last}, logits);  // 3 blocks
  REQUIRE(cache.free_blocks() == 2);
  const std::vector<int32_t> table(cache.block_table(0).begin(), cache.block_table(0).end());

  // A's decode crosses into a 4th block (1) and B's prefill needs 2: 3 > 2 free.
  std::vector<int32_t> toks(b);
  toks.push_back(7);
  std::vector<SeqStep> step{{1, 0, 8}, {0, 12, 1}};
  REQUIRE_THROWS_WITH(model.forward(cache, {toks, step, Logits::Last}, logits),
                      Contains("needs 3 more blocks") && Contains("2 of 5 are free"));
  CHECK(cache.free_blocks() == 2);
  CHECK(cache.blocks_held(0) == 3);
  CHECK(cache.blocks_held(1) == 0);
  CHECK(cache.length(0) == 12);
  CHECK(cache.length(1) == 0);
  CHECK(std::equal(table.begin(), table.end(), cache.block_table(0).begin()));

  // A alone goes on, with the logits an untroubled cache gives.
  SeqStep d{0, 12, 1};
  int32_t seven = 7;
  model.forward(cache, {std::span(&seven, 1), std::span(&d, 1), Logits::Last}, logits);
  auto fresh = model.make_cache(1, 16, 4);
  model.forward(fresh, {a, std::span(&sa, 1), Logits::Last}, want);
  model.forward(fresh, {std::span(&seven, 1), std::span(&d, 1), Logits::Last}, want);
  CHECK(logits == want);
  CHECK(cache.free_blocks() == 1);
}

TEST_CASE("forward rejects reads of rows never written and negative row offsets") {
  auto model = Paged4::random(5);
  auto cache = model.make_cache(2, 16);
  std::vector<float> logits;
  int32_t t = 1;
  SeqStep ahead{1, 4, 1};
  REQUIRE_THROWS_WITH(
      model.forward(cache, {std::span(&t, 1), std::span(&ahead, 1), Logits::Last}, logits),
      Contains("n_past = 4") && Contains("cache slot 1 holds only 0 tokens"));
  SeqStep neg{0, 0, 1, -2};
  REQUIRE_THROWS_WITH(
      model.forward(cache, {std::span(&t, 1), std::span(&neg, 1), Logits::Last}, logits),
      Contains("row_offset = -2"));
  REQUIRE_THROWS_WITH(cache.release(2), Contains("release of slot 2 outside [0, 2)"));
}

TEST_CASE("the block allocator hands out each block once") {
  sk::kv::BlockAllocator alloc(3);
  std::vector<int32_t> got;
  alloc.allocate(2, got);
  REQUIRE(got.size() == 2);
  CHECK(got[0] != got[1]);
  REQUIRE_THROWS_WITH(alloc.allocate(2, got), Contains("needs 2 more blocks, 1 of 3 are free"));
  CHECK(got.size() == 2);
  alloc.free(got[0]);
  REQUIRE_THROWS_WITH(alloc.free(got[0]),
                      Contains("block " + std::to_string(got[0]) + " is not allocated"));
  REQUIRE_THROWS_WITH(alloc.free(7), Contains("block 7 is not allocated"));
  REQUIRE_THROWS_WITH(sk::kv::BlockAllocator(0), Contains("n_blocks must be >= 1, got 0"));
}

TEST_CASE("capacity: bytes per token, utilisation and waste per layout") {
  std::vector<float> logits;
  std::vector<int32_t> toks(6, 1);
  std::vector<SeqStep> seqs{{0, 0, 1}, {1, 0, 5}};  // lengths 1 and 5

  auto c = Contig::random(3);
  auto cc = c.make_cache(3, 16);
  auto cap = cc.capacity();
  CHECK(cap.bytes_per_token == 2 * 2 * 64 * 4);  // 2 x layers x d_model x sizeof(float)
  CHECK(cap.capacity_tokens == 48);
  CHECK(cap.bytes == 48 * cap.bytes_per_token);
  CHECK(cap.reserved_tokens == 0);
  CHECK(cap.utilisation() == 1.0);
  c.forward(cc, {toks, seqs, Logits::Last}, logits);
  cap = cc.capacity();
  CHECK(cap.sequences == 2);
  CHECK(cap.stored_tokens == 6);
  CHECK(cap.reserved_tokens == 32);  // max_len per slot in use
  CHECK(cap.waste_tokens() == (16 - 1) + (16 - 5));
  CHECK(cap.utilisation() == Approx(6.0 / 32));
  CHECK(cap.free_tokens() == 16);

  auto p = Paged4F16::random(3);
  auto pc = p.make_cache(3, 16, 6);
  cap = pc.capacity();
  CHECK(cap.bytes_per_token == 2 * 2 * 64 * 2);  // f16
  CHECK(cap.capacity_tokens == 24);
  CHECK(pc.bytes() == 24 * cap.bytes_per_token);
  p.forward(pc, {toks, seqs, Logits::Last}, logits);
  cap = pc.capacity();
  CHECK(cap.reserved_tokens == 12);                // 1 + 2 blocks of 4
  CHECK(cap.waste_tokens() == (4 - 1) + (8 - 5));  // the tails of the last blocks
  CHECK(cap.utilisation() == Approx(0.5));
  pc.release(1);
  cap = pc.capacity();
  CHECK(cap.reserved_tokens == 4);
  CHECK(cap.stored_tokens == 1);
  std::ostringstream os;
  os << cap;
  CHECK_THAT(os.str(),
             Contains("paged4-f16") && Contains("512 B/token") && Contains("waste 3 tokens"));

  // What the engine's memory plan charges a token before any cache exists is what a cache of
  // those dimensions then reports, whatever the element (an int8 cache's scales included).
  using namespace servekit::kv;
  CHECK(ContiguousCache<Contiguous>::token_bytes(2, 64, 4) ==
        ContiguousCache<Contiguous>(2, 64, 1, 8, 4).bytes_per_token());
  CHECK(ContiguousCache<ContiguousI8>::token_bytes(2, 64, 4) == 2 * 2 * 64 + 2 * 2 * 4 * 4);
  CHECK(ContiguousCache<ContiguousI8>::token_bytes(2, 64, 4) ==
        ContiguousCache<ContiguousI8>(2, 64, 1, 8, 4).bytes_per_token());
  CHECK(PagedCache<PagedI8<4>>::token_bytes(3, 32, 2) ==
        PagedCache<PagedI8<4>>(3, 32, 2, 8, 4, 2).bytes_per_token());
  CHECK(PagedCache<PagedF16<4>>::token_bytes(3, 32, 2) == 2 * 3 * 32 * 2);
}

TEST_CASE("padded batch rejects bad input") {
  std::vector<std::vector<int32_t>> none;
  REQUIRE_THROWS_WITH(sk::serve::PaddedBatch(none, 0), Contains("no prompts"));
  std::vector<std::vector<int32_t>> p{{1, 2}, {}};
  REQUIRE_THROWS_WITH(sk::serve::PaddedBatch(p, 0), Contains("prompt 1 is empty"));
  p[1] = {3};
  std::vector<int32_t> slots{0};
  REQUIRE_THROWS_WITH(sk::serve::PaddedBatch(p, 0, slots), Contains("1 slots for 2 prompts"));
  auto model = Contig::random(3);
  auto cache = model.make_cache(2, 8);
  std::vector<float> logits;
  sk::serve::PaddedBatch pb(p, 0);
  std::vector<int32_t> one{1};
  REQUIRE_THROWS_WITH(pb.decode(model, cache, one, logits), Contains("decode before prefill"));
  pb.prefill(model, cache, logits);
  REQUIRE_THROWS_WITH(pb.decode(model, cache, one, logits), Contains("got 1 tokens for 2 rows"));
  REQUIRE_THROWS_WITH(pb.prefill(model, cache, logits), Contains("prefill called twice"));
}
