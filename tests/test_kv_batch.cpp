// SPDX-License-Identifier: Apache-2.0
// Batching invariants for every cache layout x cache dtype: a sequence's greedy tokens do not
// depend on what else is in its batch. Checked for one padded (contiguous) or ragged batch of
// prompts of different lengths, and for a stream of requests that join and leave between
// steps, reusing released slots and blocks. An f16 cache is compared with itself alone.
#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <set>

#include "kv_support.hpp"
#include "servekit/serve/padded_batch.hpp"
#include "servekit/weights/formats.hpp"

namespace sk = servekit;
using sk::model::Logits;
using sk::model::SeqStep;
using sk::test::Combo;

namespace {
// Prompts of lengths 1..20, random ids, fixed seed.
std::vector<std::vector<int32_t>> prompts(int vocab) {
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> p;
  for (int len : {5, 1, 12, 3, 20, 7}) {
    std::vector<int32_t> ids(len);
    for (auto& x : ids) x = static_cast<int32_t>(rng() % vocab);
    p.push_back(ids);
  }
  return p;
}
constexpr int kNew[] = {8, 3, 6, 9, 4, 7};  // tokens to generate per prompt
}  // namespace

// Every layout x cache dtype, for both fixture models.
using A1 = Combo<sk::dims::TinyA, sk::kv::Contiguous>;
using A2 = Combo<sk::dims::TinyA, sk::kv::ContiguousF16>;
using A3 = Combo<sk::dims::TinyA, sk::kv::Paged<4>>;
using A4 = Combo<sk::dims::TinyA, sk::kv::PagedF16<4>>;
using A5 = Combo<sk::dims::TinyA, sk::kv::Paged<16>>;
using B1 = Combo<sk::dims::TinyB, sk::kv::Contiguous>;
using B2 = Combo<sk::dims::TinyB, sk::kv::ContiguousF16>;
using B3 = Combo<sk::dims::TinyB, sk::kv::Paged<4>>;
using B4 = Combo<sk::dims::TinyB, sk::kv::PagedF16<4>>;
using B5 = Combo<sk::dims::TinyB, sk::kv::Paged<16>>;
// Other weight formats: a sequence's tokens must not depend on its batch there either.
using W1 = Combo<sk::dims::TinyA, sk::kv::Paged<4>, sk::weights::F16>;
using W2 = Combo<sk::dims::TinyA, sk::kv::Contiguous, sk::weights::BF16>;
using W3 =
    Combo<sk::dims::TinyB, sk::kv::PagedF16<4>, sk::weights::U8ZeroPoint<sk::weights::PerChannel>>;
// int8 caches (a scale per token and head): a row's codes depend on that row alone.
using I1 = Combo<sk::dims::TinyA, sk::kv::PagedI8<4>>;
using I2 = Combo<sk::dims::TinyB, sk::kv::ContiguousI8>;
using I3 =
    Combo<sk::dims::TinyB, sk::kv::PagedI8<4>, sk::weights::U8ZeroPoint<sk::weights::PerChannel>>;
#define KV_COMBOS A1, A2, A3, A4, A5, B1, B2, B3, B4, B5, W1, W2, W3, I1, I2, I3

TEMPLATE_TEST_CASE("one batch of prompts of different lengths gives each its tokens alone",
                   "[kv][batch]", KV_COMBOS) {
  using D = typename TestType::Dims;
  using Model = typename TestType::Model;
  constexpr int V = D::vocab;
  auto model = Model::load(sk::test::fixture_dir<D>());
  INFO(Model::name());
  const auto p = prompts(V);
  const int B = static_cast<int>(p.size()), n = 8;
  std::vector<std::vector<int32_t>> alone;
  for (const auto& x : p) alone.push_back(sk::test::greedy_alone(model, x, n));

  std::vector<float> logits;
  std::vector<std::vector<int32_t>> got(B);
  std::vector<int32_t> next(B);
  auto take = [&] {
    for (int i = 0; i < B; i++)
      got[i].push_back(next[i] = sk::serve::argmax(sk::test::row(logits, i, V)));
  };
  int longest = 0;
  for (const auto& x : p) longest = std::max(longest, static_cast<int>(x.size()));

  if constexpr (!sk::kv::is_paged<typename TestType::Kv>) {
    // The course's static batch: left padding, mask, position ids.
    auto cache = model.make_cache(B, longest + n);
    sk::serve::PaddedBatch pb(p, 0);
    pb.prefill(model, cache, logits);
    take();
    for (int s = 1; s < n; s++) pb.decode(model, cache, next, logits), take();
    const auto cap = cache.capacity();
    CHECK(cap.stored_tokens == B * (longest + n - 1));  // the last token is never fed
    CHECK(cap.reserved_tokens == B * (longest + n));
    for (int i = 0; i < B; i++) CHECK(got[i] == alone[i]);
    for (auto& g : got) g.clear();
  }
  // Ragged: every layout.
  auto cache = model.make_cache(B, longest + n);
  std::vector<int32_t> tokens;
  std::vector<SeqStep> seqs;
  for (int i = 0; i < B; i++) {
    seqs.push_back({i, 0, static_cast<int32_t>(p[i].size())});
    tokens.insert(tokens.end(), p[i].begin(), p[i].end());
  }
  model.forward(cache, {tokens, seqs, Logits::Last}, logits);
  take();
  for (int s = 1; s < n; s++) {
    for (int i = 0; i < B; i++) seqs[i] = {i, static_cast<int32_t>(p[i].size()) + s - 1, 1};
    model.forward(cache, {next, seqs, Logits::Last}, logits);
    take();
  }
  for (int i = 0; i < B; i++) {
    INFO("sequence " << i << " (" << p[i].size() << " prompt tokens)");
    CHECK(got[i] == alone[i]);
  }
}

TEMPLATE_TEST_CASE("requests joining and leaving between steps keep their tokens",
                   "[kv][batch][join]", KV_COMBOS) {
  using D = typename TestType::Dims;
  using Kv = typename TestType::Kv;
  using Model = typename TestType::Model;
  constexpr int V = D::vocab;
  auto model = Model::load(sk::test::fixture_dir<D>());
  INFO(Model::name());
  const auto p = prompts(V);
  const int R = static_cast<int>(p.size());
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < R; i++) alone.push_back(sk::test::greedy_alone(model, p[i], kNew[i]));

  // 3 slots for 6 requests; a paged pool of 12 blocks of 4, so that admission waits for
  // blocks and later requests reuse the blocks of earlier ones.
  constexpr int kSlots = 3, kMaxLen = 28;
  auto cache = [&] {
    if constexpr (sk::kv::is_paged<Kv>)
      return model.make_cache(kSlots, kMaxLen, Kv::block_tokens == 4 ? 12 : 3);
    else
      return model.make_cache(kSlots, kMaxLen);
  }();
  auto blocks_for = [](int rows) {
    if constexpr (sk::kv::is_paged<Kv>) return (rows + Kv::block_tokens - 1) / Kv::block_tokens;
    return 0;
  };

  struct Live {
    int req, slot, n_past;
    std::vector<int32_t> out;
  };
  std::vector<Live> live;
  std::vector<std::vector<int32_t>> got(R);
  std::map<int32_t, std::set<int>> block_users;  // block id -> requests that held it
  int next_req = 0, reserved_blocks = 0, steps = 0;
  std::vector<float> logits;
  while (next_req < R || !live.empty()) {
    REQUIRE(++steps < 100);
    // Admit while a slot is free and (paged) the whole request's blocks fit.
    while (next_req < R && cache.free_slots() > 0) {
      const int need = blocks_for(static_cast<int>(p[next_req].size()) + kNew[next_req]);
      if constexpr (sk::kv::is_paged<Kv>)
        if (reserved_blocks + need > cache.n_blocks()) break;
      reserved_blocks += need;
      live.push_back({next_req, cache.acquire(), 0, {}});
      next_req++;
    }
    // One mixed step: prefill for the new, one decode token for the rest.
    std::vector<int32_t> tokens;
    std::vector<SeqStep> seqs;
    for (auto& l : live) {
      if (l.n_past == 0) {
        tokens.insert(tokens.end(), p[l.req].begin(), p[l.req].end());
        seqs.push_back({l.slot, 0, static_cast<int32_t>(p[l.req].size())});
      } else {
        tokens.push_back(l.out.back());
        seqs.push_back({l.slot, l.n_past, 1});
      }
    }
    model.forward(cache, {tokens, seqs, Logits::Last}, logits);
    for (std::size_t i = 0; i < live.size(); i++) {
      auto& l = live[i];
      l.n_past += seqs[i].n_new;
      l.out.push_back(sk::serve::argmax(sk::test::row(logits, static_cast<int>(i), V)));
      if constexpr (sk::kv::is_paged<Kv>)
        for (int32_t blk : cache.block_table(l.slot)) block_users[blk].insert(l.req);
    }
    // Leave: finished requests give back their slot (and blocks).
    for (auto it = live.begin(); it != live.end();) {
      if (static_cast<int>(it->out.size()) == kNew[it->req]) {
        got[it->req] = it->out;
        cache.release(it->slot);
        reserved_blocks -= blocks_for(static_cast<int>(p[it->req].size()) + kNew[it->req]);
        it = live.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (int i = 0; i < R; i++) {
    INFO("request " << i);
    CHECK(got[i] == alone[i]);
  }
  CHECK(cache.free_slots() == kSlots);
  CHECK(cache.capacity().stored_tokens == 0);
  if constexpr (sk::kv::is_paged<Kv>) {
    CHECK(cache.free_blocks() == cache.n_blocks());
    bool reused = false;
    for (const auto& [blk, users] : block_users) reused |= users.size() > 1;
    CHECK(reused);
  }
}
