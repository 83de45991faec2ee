// SPDX-License-Identifier: Apache-2.0
// Unmerged LoRA: the host kernels (kernels/host/lora.hpp) against the oracle and fused into the
// linear, and, run by the emulator, each PEFT fixture adapter through its slot gives HF + PEFT's
// logits under every dispatch policy. The device kernels against the oracle:
// test_kernels_lora.cpp; the engine serving many adapters at once: test_engine_emulated.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "servekit/backend/emulated.hpp"
#include "servekit/backend/host.hpp"
#include "servekit/kernels/ref/lora.hpp"
#include "servekit/lora/adapter.hpp"
#include "servekit/model/gpt2.hpp"
#include "lora_tables.hpp"
#include "support/hf_checks.hpp"

namespace sk = servekit;
using sk::kernels::LoraMats;
using sk::kernels::LoraParams;
using sk::test::fixture_dir;
using namespace lora_test;

namespace {
using Emu = sk::backend::Emulated;
template <class D, class Policy>
using Lora = sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Paged<16>, Policy, Emu>>;
const char* const kFixtures[] = {"r4", "r8", "r16"};

// The three PEFT fixture adapters of D, in slots 0..2.
template <class D, class Model>
void add_fixtures(Model& model) {
  for (const char* f : kFixtures)
    model.add_adapter(sk::lora::load_adapter<D>(fixture_dir<D>() / "lora" / f));
}
}  // namespace

TEST_CASE("host LoRA kernels give the oracle's deltas, gathered and segmented the same bits",
          "[lora][host]") {
  each_case([&](int K, int Nout, const Case& c) {
    const Tables& t = c.t;
    const Plan& pl = c.pl;
    const int N = c.N;
    const auto &x = c.x, &y = c.y, &want = c.want;
    const auto &ad = pl.ad, &distinct = pl.distinct;
    std::vector<float> v(std::size_t(N) * 16, -1e30f);  // garbage the kernels must overwrite
    const LoraParams p = params(nullptr, x.data(), t, pl, v.data(), N, K, Nout);
    // The oracle's deltas; rows without an adapter, or whose adapter skips this linear,
    // untouched; gathered and segmented the same bits (each row's arithmetic is its own).
    auto host = [&](auto policy) {
      auto out = y;
      LoraParams q = p;
      q.y = out.data();
      std::fill(v.begin(), v.end(), -1e30f);
      sk::backend::Ops<sk::backend::Host>::lora<decltype(policy)>(q, distinct);
      return out;
    };
    const auto gathered = host(sk::lora::Gathered{}), segmented = host(sk::lora::Segmented{});
    float host_worst = 0;
    for (std::size_t i = 0; i < y.size(); i++)
      host_worst =
          std::max(host_worst, std::abs(gathered[i] - want[i]) / (1.f + std::abs(want[i])));
    CHECK(host_worst < 2e-5f);
    CHECK(gathered == segmented);
    for (int r = 0; r < N; r++)
      if (ad[r] < 0 || ad[r] == 4)
        for (int n = 0; n < Nout; n++)
          REQUIRE(gathered[std::size_t(r) * Nout + n] == y[std::size_t(r) * Nout + n]);
  });
}

TEMPLATE_TEST_CASE("host: the linear with its LoRA delta fused gives the delta matrix's bits",
                   "[lora][host]", sk::lora::Gathered, sk::lora::Segmented) {
  using Host = sk::backend::Ops<sk::backend::Host>;
  using Mat = sk::weights::Matrix<sk::weights::F32>;
  using E = sk::kernels::Epilogue;
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.f, 0.5f);
  // Widths past one tile panel (256) and off the vector width; one row (the unpacked matrix
  // takes the banded gemv) and many.
  for (auto [K, Nout] : {std::pair{64, 600}, std::pair{200, 70}}) {
    const Tables t = random_tables(K, Nout, rng, g);
    std::vector<float> wf(std::size_t(K) * Nout), b(Nout);
    for (auto& v : wf) v = g(rng);
    for (auto& v : b) v = g(rng);
    const auto W = Mat::from_f32(wf, K, Nout);
    const auto P = Host::resident(Mat::from_f32(wf, K, Nout));
    // The integer kernel's epilogue too (it stores its rows in the same order as the float one).
    using Q8 = sk::weights::Matrix<sk::weights::W8A8<sk::weights::PerChannel>>;
    const auto Q = Host::resident(Q8::from_f32(wf, K, Nout));
    for (int N : {1, 5, 37, 150}) {
      INFO("K = " << K << ", Nout = " << Nout << ", N = " << N);
      std::vector<float> x(std::size_t(N) * K), base(std::size_t(N) * Nout);
      for (auto& v : x) v = g(rng);
      for (auto& v : base) v = g(rng);
      Plan pl = random_plan(N, static_cast<int>(t.tab.size()), rng);
      std::vector<float> v(std::size_t(N) * 16, -1e30f);
      // The separate path: the deltas into a zeroed matrix, which the linear adds.
      std::vector<float> d(std::size_t(N) * Nout, 0.f);
      const LoraParams p = params(d.data(), x.data(), t, pl, v.data(), N, K, Nout);
      Host::lora<TestType>(p, pl.distinct);
      auto check = [&]<E Ep>(const auto& mat) {
        auto want = base, got = base;
        Host::linear<Ep>(want.data(), x.data(), mat, b.data(), N, d.data());
        std::fill(v.begin(), v.end(), -1e30f);
        LoraParams q = p;
        q.y = nullptr;  // the fused path writes no delta matrix
        if constexpr (std::is_same_v<std::decay_t<decltype(mat)>, Mat>)
          sk::kernels::host::linear_lora<Ep>(got.data(), x.data(), mat, b.data(), N, q,
                                             std::is_same_v<TestType, sk::lora::Segmented>);
        else
          Host::linear_lora<Ep, TestType>(got.data(), x.data(), mat, b.data(), N, q);
        REQUIRE(got == want);
      };
      check.template operator()<E::Store>(P);
      check.template operator()<E::Gelu>(P);
      check.template operator()<E::Residual>(P);
      check.template operator()<E::Store>(W);
      check.template operator()<E::Residual>(W);
      check.template operator()<E::Store>(Q);
      check.template operator()<E::Residual>(Q);
    }
  }
  // A table without the transposed B the host kernels read is refused, by name, when a row of
  // the step uses that slot (fused or not); rows on other slots run.
  Tables t = random_tables(8, 16, rng, g);
  t.tab[1].bt = nullptr;
  std::vector<float> x(4 * 8, 1.f), y(4 * 16), v(4 * 16);
  Plan pl = plan_of({0, 1, -1, 2});
  const LoraParams p = params(y.data(), x.data(), t, pl, v.data(), 4, 8, 16);
  CHECK_THROWS_WITH(Host::lora<TestType>(p, pl.distinct),
                    Catch::Contains("slot 1") && Catch::Contains("LoraMats::bt"));
  const auto W = Host::resident(Mat::from_f32(std::vector<float>(8 * 16, 0.5f), 8, 16));
  CHECK_THROWS_WITH((Host::linear_lora<E::Store, TestType>(y.data(), x.data(), W, nullptr, 4, p)),
                    Catch::Contains("slot 1") && Catch::Contains("LoraMats::bt"));
  Plan other = plan_of({0, 2, -1, 3});
  const LoraParams q = params(y.data(), x.data(), t, other, v.data(), 4, 8, 16);
  CHECK_NOTHROW(Host::lora<TestType>(q, other.distinct));
}

TEST_CASE("host: the segmented fused linear stores a task's rows grouped by adapter",
          "[lora][host]") {
  namespace kh = sk::kernels::host;
  std::mt19937 rng(9);
  std::normal_distribution<float> g(0.f, 0.5f);
  const Tables t = random_tables(8, 16, rng, g);
  // Row i's slot; the adapter registry's plan groups the rows with one: slot 0 {1, 4, 7},
  // slot 1 {3, 8}, slot 2 {0, 5}.
  const Plan pl = plan_of({2, 0, -1, 1, 0, 2, -1, 0, 1});
  const LoraParams p = params(nullptr, nullptr, t, pl, nullptr, 9, 8, 16);
  auto order = [](const kh::LoraAdd& add, int m0, int rows) {
    const int32_t* idx = kh::store_order(add, m0, rows);
    return std::vector<int32_t>(idx, idx + rows);
  };
  using V = std::vector<int32_t>;
  // Segmented: the rows with an adapter as the plan groups them, then the others in batch
  // order, within the task's rows (3..7 below); gathered: batch order.
  CHECK(order(kh::LoraAdd{&p, true}, 0, 9) == V{1, 4, 7, 3, 8, 0, 5, 2, 6});
  CHECK(order(kh::LoraAdd{&p, true}, 3, 5) == V{4, 7, 3, 5, 6});
  CHECK(order(kh::LoraAdd{&p, false}, 0, 9) == V{0, 1, 2, 3, 4, 5, 6, 7, 8});
  // An order that names a row twice, or a row without an adapter, is not followed: batch
  // order, whose values are the same.
  Plan twice = pl;
  twice.order[1] = twice.order[0];
  const LoraParams q = params(nullptr, nullptr, t, twice, nullptr, 9, 8, 16);
  CHECK(order(kh::LoraAdd{&q, true}, 0, 9) == V{0, 1, 2, 3, 4, 5, 6, 7, 8});
  Plan unadapted = pl;
  unadapted.order[0] = 2;
  const LoraParams u = params(nullptr, nullptr, t, unadapted, nullptr, 9, 8, 16);
  CHECK(order(kh::LoraAdd{&u, true}, 0, 9) == V{0, 1, 2, 3, 4, 5, 6, 7, 8});
}

TEMPLATE_TEST_CASE("emulated: unmerged PEFT adapters give HF + PEFT's logits",
                   "[lora][emulated][hf]", sk::lora::Loop, sk::lora::Gathered,
                   sk::lora::Segmented) {
  using D = sk::dims::TinyA;
  auto model = Lora<D, TestType>::load(fixture_dir<D>());
  add_fixtures<D>(model);
  for (int slot = 0; slot < 3; slot++) {
    INFO("adapter " << kFixtures[slot]);
    const auto ref = sk::test::load_reference(fixture_dir<D>() / "lora" / kFixtures[slot]);
    for (const auto& c : ref.cases) {
      INFO("case " << c.name);
      auto cache = model.make_cache(1);
      sk::test::check_hf_case(model, cache, 0, c, ref.n_steps, 1e-4f, slot);
    }
  }
}

TEST_CASE("emulated: tiny-b's rsLoRA adapter unmerged gives HF + PEFT's logits",
          "[lora][emulated][hf]") {
  using D = sk::dims::TinyB;
  auto model = Lora<D, sk::lora::Segmented>::load(fixture_dir<D>());
  add_fixtures<D>(model);
  for (int slot = 0; slot < 3; slot++) {
    const auto ref = sk::test::load_reference(fixture_dir<D>() / "lora" / kFixtures[slot]);
    const auto& c = ref.cases.front();
    INFO("adapter " << kFixtures[slot] << " case " << c.name);
    auto cache = model.make_cache(1);
    sk::test::check_hf_case(model, cache, 0, c, ref.n_steps, 1e-4f, slot);
  }
}
