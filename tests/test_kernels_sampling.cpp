// SPDX-License-Identifier: Apache-2.0
// Sampling on the device (kernels::sample) under emulation, against HF's warpers (temperature,
// top-k with ties kept, top-p) computed on the host in double. Every seed is fixed, so each
// statistical check either always passes or always fails; its margin is chosen so that a
// correct sampler fails it with probability below 1e-6 (Bernstein's inequality, union bound).
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <span>
#include <vector>

#include "device_mirror.hpp"
#include "servekit/kernels/sampling.hpp"
#include "servekit/serve/sampling.hpp"
#include "test_kernels_support.hpp"
#if !defined(__CUDACC__)
#include "servekit/backend/emulated.hpp"
#endif

namespace sk = servekit;
namespace kn = servekit::kernels;
using Catch::Contains;
using namespace kernels_test;
using device_test::on;

namespace {

// The filtered distribution: p (V), zero outside the kept set; `margin` is the distance from
// top_p of the cumulative masses the top-p cut looked at (the kernel sums in fp32, so a case
// with a margin of ~1e-6 could fall either way; the tests require > 1e-4).
struct Filtered {
  std::vector<double> p;
  double margin = std::numeric_limits<double>::infinity();
};

Filtered filtered(std::span<const float> x, float T, int top_k, float top_p) {
  const int V = static_cast<int>(x.size());
  std::vector<float> z(V);
  for (int i = 0; i < V; i++) z[i] = x[i] / T;  // the kernel's fp32 division
  std::vector<int> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return z[a] > z[b]; });
  int n = V;
  if (top_k > 0 && top_k < V) {
    const float kth = z[order[top_k - 1]];
    n = top_k;
    while (n < V && z[order[n]] == kth) n++;  // ties with the k-th value stay
  }
  std::vector<double> w(V, 0.0);
  double S = 0;
  for (int j = 0; j < n; j++) S += w[order[j]] = std::exp(double(z[order[j]]) - z[order[0]]);
  Filtered f;
  if (top_p < 1.f) {
    double cum = 0;
    int j = 0;
    while (j < n) {  // whole groups of equal values: the kernel cuts on a value
      const float g = z[order[j]];
      while (j < n && z[order[j]] == g) cum += w[order[j++]] / S;
      f.margin = std::min(f.margin, std::abs(cum - top_p));
      if (cum >= top_p) break;
    }
    for (int i = j; i < n; i++) w[order[i]] = 0;
    n = j;
  }
  const double kept = std::accumulate(w.begin(), w.end(), 0.0);
  f.p.resize(V);
  for (int i = 0; i < V; i++) f.p[i] = w[i] / kept;
  return f;
}

// Bernstein: a frequency of N Bernoulli(p) draws is off by more than this with probability at
// most delta.
double bernstein(double p, int N, double delta) {
  const double L = std::log(2.0 / delta), var = p * (1 - p);
  return (L / 3 + std::sqrt(L * L / 9 + 2.0 * N * L * var)) / N;
}

std::vector<uint64_t> seeds_from(uint64_t salt, int n) {
  std::vector<uint64_t> s(n);
  for (int i = 0; i < n; i++) s[i] = salt * 0x9E3779B97F4A7C15ull + 0xD1B54A32D192ED03ull * i;
  return s;
}

// Every row with the same parameters; row m draws from seeds[m] (0 without seeds) at `step`.
void sample_all(int32_t* ids, const float* x, const uint64_t* seeds, uint64_t step, int M, int V,
                float T, int top_k, float top_p) {
  std::vector<kn::RowSampling> rows(M);
  for (int m = 0; m < M; m++) {
    rows[m] = {.seed = seeds ? seeds[m] : 0,
               .index = step,
               .temperature = T,
               .top_p = top_p,
               .top_k = top_k};
    kn::check_row(rows[m], m);
  }
  const std::size_t n = M > 0 && V > 0 ? std::size_t(M) * V : 0;
  kn::sample({on(ids, M > 0 ? M : 0), nullptr, on(x, n), on(rows), M, V});
}

// ids of N draws from one row: N rows of the same logits, one seed each.
std::vector<int32_t> draw(std::span<const float> x, int N, const std::vector<uint64_t>& seeds,
                          uint64_t step, float T, int top_k, float top_p) {
  const int V = static_cast<int>(x.size());
  std::vector<float> rows(static_cast<std::size_t>(N) * V);
  for (int r = 0; r < N; r++) std::copy(x.begin(), x.end(), rows.begin() + std::size_t(r) * V);
  std::vector<int32_t> ids(N, -1);
  sample_all(ids.data(), rows.data(), seeds.data(), step, N, V, T, top_k, top_p);
  return ids;
}

std::vector<float> normal_logits(int V, float sd, std::mt19937& rng) {
  std::normal_distribution<float> d(0.f, sd);
  std::vector<float> x(V);
  for (auto& v : x) v = d(rng);
  return x;
}

// Index of the r-th largest logit (0: the largest).
int rank_index(std::span<const float> x, int r) {
  std::vector<int> o(x.size());
  std::iota(o.begin(), o.end(), 0);
  std::stable_sort(o.begin(), o.end(), [&](int a, int b) { return x[a] > x[b]; });
  return o[r];
}

}  // namespace

TEST_CASE("philox4x32_10 gives Random123's known answers", "[kernels][emulated][sampling]") {
  // Random123 tests/kat_vectors, philox4x32_10 (counter, key -> output).
  auto eq = [](kn::U32x4 a, kn::U32x4 b) {
    return a.x == b.x && a.y == b.y && a.z == b.z && a.w == b.w;
  };
  CHECK(eq(kn::philox4x32_10({0, 0, 0, 0}, 0, 0),
           {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  CHECK(eq(kn::philox4x32_10({~0u, ~0u, ~0u, ~0u}, ~0u, ~0u),
           {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  CHECK(eq(kn::philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0xa4093822u,
                             0x299f31d0u),
           {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST_CASE("top_k = 1 draws the argmax; a tied maximum draws among the tied",
          "[kernels][emulated][sampling]") {
  std::mt19937 rng(11);
  for (int V : {1, 7, 31, 1000, 1500, 5000}) {
    INFO("V = " << V);
    const int M = 9;
    auto x = random_floats(static_cast<std::size_t>(M) * V, rng);
    // Ties below the maximum, which top_k = 1 must cut.
    for (int m = 0; m < M && V > 4; m++) {
      float* r = x.data() + std::size_t(m) * V;
      r[1] = r[V - 1] = r[2];
    }
    auto seeds = seeds_from(V, M);
    std::vector<int32_t> ids(M, -1);
    sample_all(ids.data(), x.data(), seeds.data(), 0, M, V, 0.8f, 1, 1.f);
    for (int m = 0; m < M; m++)
      CHECK(ids[m] == sk::serve::argmax({x.data() + std::size_t(m) * V, std::size_t(V)}));
  }
  // HF keeps every logit equal to the k-th: with two maxima both must be drawn, nothing else.
  for (int V : {40, 1500}) {
    INFO("V = " << V);
    auto x = random_floats(V, rng);
    const int a = rank_index(x, 0), b = (a + V / 2) % V;
    x[b] = x[a];
    const auto ids = draw(x, 64, seeds_from(V + 1, 64), 0, 1.f, 1, 1.f);
    const std::set<int32_t> got(ids.begin(), ids.end());
    CHECK(got == std::set<int32_t>{std::min(a, b), std::max(a, b)});
  }
}

TEST_CASE("draws follow the filtered distribution and never leave it",
          "[kernels][emulated][sampling]") {
  struct Case {
    int V;
    float sd, T;
    int top_k;
    float top_p;
    int N;
    bool tie_at_k;
  };
  // V <= 1024 runs one warp per row, the 1500 case the 256-thread block.
  const Case cases[] = {
      {5, 1.0f, 1.0f, 0, 1.f, 4000, false},    // softmax only
      {17, 1.5f, 0.7f, 6, 1.f, 4000, true},    // top-k, a tie at the k-th value
      {40, 1.5f, 1.3f, 0, 0.8f, 4000, false},  // top-p
      {29, 2.0f, 0.9f, 12, 0.7f, 4000, true},  // both
      {1500, 2.0f, 1.0f, 10, 0.97f, 1000, true},
  };
  const double delta = 1e-6;
  std::mt19937 rng(12);
  for (const Case& c : cases) {
    INFO("V = " << c.V << ", T = " << c.T << ", top_k = " << c.top_k << ", top_p = " << c.top_p);
    auto x = normal_logits(c.V, c.sd, rng);
    if (c.tie_at_k) x[rank_index(x, c.top_k)] = x[rank_index(x, c.top_k - 1)];
    const Filtered f = filtered(x, c.T, c.top_k, c.top_p);
    REQUIRE(f.margin > 1e-4);
    const auto ids = draw(x, c.N, seeds_from(c.V, c.N), 3, c.T, c.top_k, c.top_p);
    std::vector<int> count(c.V, 0);
    for (int32_t id : ids) {
      REQUIRE((id >= 0 && id < c.V));
      REQUIRE(f.p[id] > 0);  // inside the top-k set (ties kept) and the nucleus
      count[id]++;
    }
    const int kept =
        static_cast<int>(std::count_if(f.p.begin(), f.p.end(), [](double p) { return p > 0; }));
    // Each kept token's frequency within its Bernstein bound at delta / kept (union bound: the
    // whole case fails with probability < 1e-6 if the kernel samples f.p exactly).
    double worst = 0;
    for (int i = 0; i < c.V; i++) {
      if (f.p[i] == 0) continue;
      const double dev = std::abs(double(count[i]) / c.N - f.p[i]);
      worst = std::max(worst, dev / bernstein(f.p[i], c.N, delta / kept));
    }
    INFO("kept " << kept << " tokens; worst deviation / bound " << worst);
    CHECK(worst <= 1.0);
    // The check has the power to see a wrong temperature: at 1.5 T some token moves by more
    // than its bound.
    const Filtered g = filtered(x, 1.5f * c.T, c.top_k, c.top_p);
    double moved = 0;
    for (int i = 0; i < c.V; i++)
      if (f.p[i] > 0)
        moved = std::max(moved, std::abs(g.p[i] - f.p[i]) / bernstein(f.p[i], c.N, delta / kept));
    INFO("at 1.5 T: deviation / bound " << moved);
    CHECK(moved > 1.0);
  }
}

TEST_CASE("a draw is a function of (seed, step) only; rows draw independently",
          "[kernels][emulated][sampling]") {
  std::mt19937 rng(13);
  const int V = 23, N = 4000;
  const auto x = normal_logits(V, 1.0f, rng);
  const Filtered f = filtered(x, 1.f, 0, 1.f);
  const auto seeds = seeds_from(7, N);
  const auto a = draw(x, N, seeds, 5, 1.f, 0, 1.f);
  CHECK(draw(x, N, seeds, 5, 1.f, 0, 1.f) == a);  // reproducible

  // The same seeds in reverse row order (another batch position) give the same ids.
  std::vector<uint64_t> rev(seeds.rbegin(), seeds.rend());
  auto b = draw(x, N, rev, 5, 1.f, 0, 1.f);
  std::reverse(b.begin(), b.end());
  CHECK(b == a);

  // Rows with different seeds agree as often as independent draws do (sum p^2), and a new
  // step is a new draw: the fraction of equal ids is within Bernstein's bound of sum p^2.
  const double q = std::inner_product(f.p.begin(), f.p.end(), f.p.begin(), 0.0);
  const double bound = bernstein(q, N / 2, 1e-6);
  int same_rows = 0;
  for (int i = 0; i < N; i += 2) same_rows += a[i] == a[i + 1];
  INFO("sum p^2 = " << q << ", bound " << bound);
  CHECK(std::abs(double(same_rows) / (N / 2) - q) <= bound);
  const auto c = draw(x, N, seeds, 6, 1.f, 0, 1.f);
  int same_step = 0;
  for (int i = 0; i < N; i += 2) same_step += a[i] == c[i];
  CHECK(std::abs(double(same_step) / (N / 2) - q) <= bound);
}

TEST_CASE("GPT-2's vocabulary: a draw lands in the nucleus", "[kernels][emulated][sampling]") {
  std::mt19937 rng(14);
  const int V = 50257, M = 4;
  // 64 tokens well above the rest, as in a trained model's peaked rows: the top-p cut falls among
  // them, where each token moves the cumulative mass by far more than fp32's rounding of it.
  auto x = normal_logits(V, 1.0f, rng);
  for (int i = 0; i < 64; i++) x[rng() % V] += 7.f;
  const auto seeds = seeds_from(50257, M);
  struct Case {
    float T;
    int top_k;
    float top_p;
  };
  for (const Case c : {Case{1.f, 0, 0.5f}, Case{0.8f, 40, 0.95f}, Case{1.2f, 0, 1.f}}) {
    INFO("T = " << c.T << ", top_k = " << c.top_k << ", top_p = " << c.top_p);
    const Filtered f = filtered(x, c.T, c.top_k, c.top_p);
    REQUIRE(f.margin > 1e-4);
    const auto ids = draw(x, M, seeds, 0, c.T, c.top_k, c.top_p);
    for (int32_t id : ids) {
      REQUIRE((id >= 0 && id < V));
      CHECK(f.p[id] > 0);
    }
  }
  // Temperature 0 is greedy.
  const auto g = draw(x, 1, seeds, 0, 0.f, 0, 1.f);
  CHECK(g[0] == sk::serve::argmax(x));
}

TEST_CASE("each row samples with its own parameters, as it would alone",
          "[kernels][emulated][sampling]") {
  std::mt19937 rng(16);
  for (int V : {300, 5000}) {
    INFO("V = " << V);
    const int M = 12;
    const auto x = random_floats(std::size_t(M) * V, rng, -3.f, 3.f);
    std::vector<kn::RowSampling> rows(M);
    for (int m = 0; m < M; m++) {
      rows[m] = {.seed = rng(),
                 .index = rng() % 500,
                 .temperature = (m % 4) * 0.4f,
                 .top_p = m % 3 ? 0.9f : 1.f,
                 .top_k = m % 2 ? 20 : 0};
      kn::check_row(rows[m], m);
    }
    std::vector<int32_t> ids(M, -2);
    std::vector<float> lp(M);
    kn::sample({on(ids), on(lp), on(x), on(rows), M, V});
    std::vector<float> want_lp;
    for (int m = 0; m < M; m++) {
      INFO("row " << m << ": T " << rows[m].temperature << ", top_k " << rows[m].top_k << ", top_p "
                  << rows[m].top_p);
      const std::span<const float> row(x.data() + std::size_t(m) * V, V);
      int32_t one = -2;
      float one_lp = 0;
      kn::sample({on(&one, 1), on(&one_lp, 1), on(row.data(), V), on(&rows[m], 1), 1, V});
      CHECK(ids[m] == one);
      CHECK(std::bit_cast<uint32_t>(lp[m]) == std::bit_cast<uint32_t>(one_lp));
      if (rows[m].temperature == 0.f) CHECK(ids[m] == sk::serve::argmax(row));
      REQUIRE((ids[m] >= 0 && ids[m] < V));
      sk::serve::log_softmax(row, want_lp);
      CHECK(lp[m] == Approx(want_lp[ids[m]]).margin(1e-5));
    }
  }
}

TEST_CASE("the device and host samplers draw the same tokens from the same stream",
          "[kernels][emulated][sampling]") {
  // Both turn sample_uniform(seed, index) into a token through the same filtered distribution;
  // only the precision of the cumulative sums differs (fp32 here, double on the host), so they
  // part only where the draw falls within rounding of a boundary.
  std::mt19937 rng(17);
  const int V = 2000, M = 200;
  const auto x = random_floats(std::size_t(M) * V, rng, -4.f, 4.f);
  sk::serve::Sampler host;
  int agree = 0;
  for (const auto& p : {sk::serve::SamplingParams{.temperature = 1.f},
                        sk::serve::SamplingParams{.temperature = 0.7f, .top_k = 50},
                        sk::serve::SamplingParams{.temperature = 1.3f, .top_p = 0.8f}}) {
    std::vector<kn::RowSampling> rows(M);
    for (int m = 0; m < M; m++)
      rows[m] = {.seed = 1000u + m,
                 .index = uint64_t(m) * 7,
                 .temperature = p.temperature,
                 .top_p = p.top_p,
                 .top_k = p.top_k};
    std::vector<int32_t> ids(M, -2);
    kn::sample({on(ids), nullptr, on(x), on(rows), M, V});
    for (int m = 0; m < M; m++) {
      auto q = p;
      q.seed = rows[m].seed;
      agree += ids[m] == host({x.data() + std::size_t(m) * V, std::size_t(V)}, q, rows[m].index);
    }
  }
  INFO(agree << " of " << 3 * M << " agree");
  CHECK(agree >= 3 * M - 3);
}

TEST_CASE("a row with no number above -inf gets id -1, which the host reports",
          "[kernels][emulated][sampling]") {
  const int V = 40;
  std::vector<float> x(2 * V, -std::numeric_limits<float>::infinity());
  for (int v = 0; v < V; v += 2) x[v] = std::nanf("");
  x[V + 7] = 1.f;  // row 1 has one number
  for (float T : {0.f, 1.f}) {
    std::vector<kn::RowSampling> rows(2, {.seed = 3, .temperature = T});
    std::vector<int32_t> ids(2, -2);
    std::vector<float> lp(2);
    kn::sample({on(ids), on(lp), on(x), on(rows), 2, V});
    CHECK(ids[0] == -1);
    CHECK(ids[1] == 7);
    CHECK(lp[1] == 0.f);
  }
}

TEST_CASE("a temperature so small that best / T overflows draws among the maxima, as the host",
          "[kernels][emulated][sampling]") {
  // best = 10, T = 1e-38: every scaled logit near the top is +inf and exp(inf - inf) is NaN, so
  // no token had a weight; the kernel then read row[-1] and returned id -1 (a fault on a GPU).
  // The limit T -> 0 is a draw among the logits equal to the max, which the host computes.
  std::mt19937 rng(23);
  sk::serve::Sampler host;
  for (int V : {40, 1500}) {           // one warp a row, and the 256-thread block
    for (float top : {10.f, -10.f}) {  // best / T overflows to +inf, or to -inf
      INFO("V = " << V << ", best logit " << top);
      const int M = 16;
      auto x = random_floats(std::size_t(M) * V, rng, top - 8.f, top - 1.f);
      for (int m = 0; m < M; m++) {
        float* r = x.data() + std::size_t(m) * V;
        r[(m * 7) % V] = top;
        if (m % 2) r[(m * 7 + V / 2) % V] = top;  // odd rows: two maxima share the mass
      }
      std::vector<kn::RowSampling> rows(M);
      for (int m = 0; m < M; m++)
        rows[m] = {.seed = 50u + m,
                   .index = uint64_t(m),
                   .temperature = 1e-38f,
                   .top_p = m % 4 == 3 ? 0.9f : 1.f,
                   .top_k = m % 4 == 2 ? 5 : 0};
      std::vector<int32_t> ids(M, -2);
      std::vector<float> lp(M);
      kn::sample({on(ids), on(lp), on(x), on(rows), M, V});
      for (int m = 0; m < M; m++) {
        INFO("row " << m);
        const float* r = x.data() + std::size_t(m) * V;
        REQUIRE((ids[m] >= 0 && ids[m] < V));
        CHECK(r[ids[m]] == top);
        const sk::serve::SamplingParams q{.temperature = 1e-38f,
                                          .top_k = rows[m].top_k,
                                          .top_p = rows[m].top_p,
                                          .seed = rows[m].seed};
        CHECK(ids[m] == host({r, std::size_t(V)}, q, rows[m].index));
        CHECK(lp[m] == Approx(sk::serve::logprob_of({r, std::size_t(V)}, ids[m])).margin(1e-5));
      }
    }
  }
}

#if !defined(__CUDACC__)
TEST_CASE("Ops<Emulated>::sample is kernels::sample", "[kernels][emulated][sampling][emulator]") {
  std::mt19937 rng(15);
  const int M = 6, V = 300;
  const auto x = random_floats(std::size_t(M) * V, rng, -2.f, 2.f);
  std::vector<kn::RowSampling> rows(M);
  for (int m = 0; m < M; m++)
    rows[m] = {.seed = 3u + m, .index = 9, .temperature = 0.9f, .top_p = 0.9f, .top_k = 50};
  std::vector<int32_t> a(M, -1), b(M, -2);
  std::vector<float> la(M), lb(M);
  kn::sample({a.data(), la.data(), x.data(), rows.data(), M, V});
  sk::backend::Ops<sk::backend::Emulated>::sample(b.data(), lb.data(), x.data(), rows.data(), M, V);
  CHECK(a == b);
  CHECK(la == lb);
}
#endif

TEST_CASE("kernels::sample names the parameter it cannot use",
          "[kernels][emulated][sampling][errors]") {
  float f[4] = {0.f, 1.f, 2.f, 3.f};
  int32_t id = -1;
  auto run = [&](int M, int V, float T, int k, float p) {
    sample_all(&id, f, nullptr, 0, M, V, T, k, p);
  };
  REQUIRE_THROWS_WITH(run(0, 4, 1.f, 0, 1.f), Contains("kernels::sample") && Contains("M = 0"));
  REQUIRE_THROWS_WITH(run(1, 0, 1.f, 0, 1.f), Contains("V = 0"));
  REQUIRE_THROWS_WITH(run(1, 4, -0.5f, 0, 1.f),
                      Contains("row 0") && Contains("temperature") && Contains("-0.5"));
  REQUIRE_THROWS_WITH(run(1, 4, std::numeric_limits<float>::infinity(), 0, 1.f),
                      Contains("temperature") && Contains("inf"));
  REQUIRE_THROWS_WITH(run(1, 4, std::nanf(""), 0, 1.f), Contains("temperature") && Contains("nan"));
  REQUIRE_THROWS_WITH(run(1, 4, 1.f, -3, 1.f), Contains("top_k") && Contains("-3"));
  REQUIRE_THROWS_WITH(run(1, 4, 1.f, 0, 0.f), Contains("top_p") && Contains("got 0"));
  REQUIRE_THROWS_WITH(run(1, 4, 1.f, 0, 1.5f), Contains("top_p") && Contains("1.5"));
  REQUIRE_THROWS_WITH(kn::sample({&id, nullptr, f, nullptr, 1, 4}), Contains("rows"));
  // Valid edges run: V = 1, top_k >= V, top_p = 1, greedy.
  run(1, 1, 1.f, 5, 1.f);
  CHECK(id == 0);
  run(1, 4, 0.f, 0, 1.f);
  CHECK(id == 3);
}
