// SPDX-License-Identifier: Apache-2.0
// The step plan (model/step_plan.hpp): its named sections tile the packed index array, and a
// sequence may ask for the logits of its last k new rows (a speculative verify's k proposed
// tokens plus one), which are then exactly the rows Logits::All gives for those tokens, on the
// host and under the emulator, and forward_pick picks a token for each of them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "servekit/backend/emulated.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/model/step_plan.hpp"
#include "servekit/serve/sampling.hpp"
#include "support/reference.hpp"

namespace sk = servekit;
using Catch::Matchers::Contains;
using sk::model::Logits;
using sk::model::SeqStep;
using D = sk::dims::TinyA;

TEST_CASE("a step layout's sections tile its array in order", "[plan]") {
  for (bool lora : {false, true})
    for (int N : {1, 7, 64}) {
      const auto at = sk::model::StepLayout::make(N, lora);
      std::vector<std::pair<std::size_t, std::size_t>> s = {
          {at.tok, N}, {at.slot, N}, {at.pos, N}, {at.first, N}, {at.row, N}, {at.pick, N}};
      if (lora)
        s.insert(s.end(), {{at.lora_slot, N},
                           {at.lora_order, N},
                           {at.lora_seg_start, N + 1},
                           {at.lora_seg_slot, N}});
      s.push_back({at.by_kind, N});
      std::size_t end = 0;
      for (const auto& [begin, count] : s) {
        CHECK(begin == end);  // no gap, no overlap
        end = begin + count;
      }
      CHECK(at.size == end);
    }
}

namespace {
// Two sequences sharing a step: a prompt of 9 tokens whose last k rows get logits, beside a
// 4-token prompt that asks for its last row only.
std::vector<int32_t> tokens_of(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % D::vocab);
  return t;
}

template <class Model>
void check_k_rows(Model& model) {
  constexpr int V = D::vocab;
  const auto a = tokens_of(9, 1), b = tokens_of(4, 2);
  std::vector<int32_t> both = a;
  both.insert(both.end(), b.begin(), b.end());
  // Reference: every row's logits, each sequence alone in its own cache.
  std::vector<float> all_a, all_b;
  {
    auto cache = model.make_cache(1, 16);
    const std::vector<SeqStep> s = {{0, 0, 9}};
    model.forward(cache, {a, s, Logits::All}, all_a);
  }
  {
    auto cache = model.make_cache(1, 16);
    const std::vector<SeqStep> s = {{0, 0, 4}};
    model.forward(cache, {b, s, Logits::All}, all_b);
  }
  for (int k : {1, 3, 9}) {
    INFO("k = " << k);
    auto cache = model.make_cache(2, 16);
    std::vector<SeqStep> s = {{0, 0, 9}, {1, 0, 4}};
    s[0].n_logits = k;
    std::vector<float> got;
    model.forward(cache, {both, s, Logits::Last}, got);
    REQUIRE(got.size() == static_cast<std::size_t>(k + 1) * V);
    for (int j = 0; j < k; j++) {
      const auto want = all_a.begin() + static_cast<std::ptrdiff_t>(9 - k + j) * V;
      CHECK(std::equal(want, want + V, got.begin() + static_cast<std::ptrdiff_t>(j) * V));
    }
    const auto want_b = all_b.begin() + 3 * V;
    CHECK(std::equal(want_b, want_b + V, got.begin() + static_cast<std::ptrdiff_t>(k) * V));
  }
  // Asking for more rows than a sequence brings is refused before anything runs.
  auto cache = model.make_cache(2, 16);
  std::vector<SeqStep> s = {{0, 0, 9}, {1, 0, 4}};
  s[1].n_logits = 5;
  std::vector<float> got;
  CHECK_THROWS_WITH(model.forward(cache, {both, s, Logits::Last}, got),
                    Contains("sequence 1") && Contains("last 5 rows") && Contains("4 new tokens"));
  CHECK(cache.length(0) == 0);
  s[1].n_logits = 0;
  CHECK_THROWS_WITH(model.forward(cache, {both, s, Logits::Last}, got), Contains("last 0 rows"));
}
}  // namespace

TEMPLATE_TEST_CASE("a sequence gets the logits of its last k rows, as Logits::All gives them",
                   "[plan]", sk::kv::Contiguous, sk::kv::Paged<4>) {
  SECTION("host") {
    auto model =
        sk::Gpt2<sk::Config<D, sk::weights::F32, TestType>>::load(sk::test::fixture_dir<D>());
    check_k_rows(model);
  }
  SECTION("emulated") {
    auto model = sk::Gpt2<sk::Config<D, sk::weights::F32, TestType, sk::lora::None,
                                     sk::backend::Emulated>>::load(sk::test::fixture_dir<D>());
    check_k_rows(model);
  }
}

TEST_CASE("forward_pick picks a token for each of a sequence's k rows of logits", "[plan]") {
  constexpr int V = D::vocab;
  using Model = sk::Gpt2<
      sk::Config<D, sk::weights::F32, sk::kv::Paged<4>, sk::lora::None, sk::backend::Emulated>>;
  auto model = Model::load(sk::test::fixture_dir<D>());
  const auto a = tokens_of(9, 3), b = tokens_of(4, 4);
  std::vector<int32_t> both = a;
  both.insert(both.end(), b.begin(), b.end());
  auto cache = model.make_cache(2, 16);
  std::vector<SeqStep> s = {{0, 0, 9}, {1, 0, 4}};
  s[0].n_logits = 4;
  std::vector<sk::RowSampling> rows(5);  // greedy
  std::vector<int32_t> ids(5);
  std::vector<float> lp(5), logits;
  model.forward_pick(cache, {both, s, Logits::Last, {}, rows}, ids, lp, &logits);
  REQUIRE(logits.size() == 5u * V);
  for (int m = 0; m < 5; m++) {
    INFO("row " << m);
    const std::span<const float> row(logits.data() + static_cast<std::size_t>(m) * V, V);
    CHECK(ids[m] == sk::serve::argmax(row));
  }
  // One sampling row per row of logits: four for the first sequence and one for the second.
  auto cache2 = model.make_cache(2, 16);
  std::vector<sk::RowSampling> two(2);
  std::vector<int32_t> ids2(2);
  std::vector<float> lp2(2);
  CHECK_THROWS_WITH(model.forward_pick(cache2, {both, s, Logits::Last, {}, two}, ids2, lp2),
                    Contains("5 rows of logits") && Contains("2 sampling rows"));
}
