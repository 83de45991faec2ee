// SPDX-License-Identifier: Apache-2.0
#pragma once
// Random LoRA tables and row plans for the LoRA kernel tests (test_kernels_lora.cpp on the device
// kernels, test_lora_device.cpp on the host's): one linear's adapters of ranks 1..16 and the
// rows' slots, grouped by adapter as Gpt2 groups them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "servekit/kernels/lora_args.hpp"
#include "servekit/kernels/lora_bt.hpp"
#include "servekit/kernels/ref/lora.hpp"

namespace lora_test {
using servekit::kernels::LoraMats;
using servekit::kernels::LoraParams;

// One linear's adapter table of ranks 1..16 (or `ranks`), slot 4's adapter leaving the linear
// alone; B also transposed, as the adapter registry keeps it for the host kernels.
struct Tables {
  std::vector<std::vector<float>> store;
  std::vector<LoraMats> tab;
};
inline Tables random_tables(int K, int Nout, std::mt19937& rng, std::normal_distribution<float>& g,
                            const std::vector<int>& ranks = {1, 3, 8, 16, 5, 9, 2}) {
  Tables t;
  t.store.reserve(3 * ranks.size());
  for (std::size_t i = 0; i < ranks.size(); i++) {
    if (i == 4) {  // slot 4's adapter leaves this linear alone
      t.tab.push_back({});
      continue;
    }
    std::vector<float> a(std::size_t(ranks[i]) * K), b(std::size_t(Nout) * ranks[i]);
    for (auto& v : a) v = g(rng);
    for (auto& v : b) v = g(rng);
    // B transposed in blocks, as the host kernels read it
    std::vector<float> bt = servekit::kernels::pack_bt(b.data(), Nout, ranks[i]);
    t.store.push_back(std::move(a));
    t.store.push_back(std::move(b));
    t.store.push_back(std::move(bt));
    const auto& st = t.store;
    t.tab.push_back({st[st.size() - 3].data(), st[st.size() - 2].data(), ranks[i], 0.25f * (i + 1),
                     st.back().data()});
  }
  return t;
}

// Rows' adapter slots in -1 .. slots - 1, and the plan Gpt2 makes of them: the adapted rows
// grouped by slot, the groups and their slots.
struct Plan {
  std::vector<int32_t> ad, order, seg_start, seg_ad, distinct;
};
inline Plan plan_of(std::vector<int32_t> ad) {
  Plan p;
  p.ad = std::move(ad);
  const int N = static_cast<int>(p.ad.size());
  for (int r = 0; r < N; r++)
    if (p.ad[r] >= 0) p.order.push_back(r);
  std::stable_sort(p.order.begin(), p.order.end(), [&](int a, int b) { return p.ad[a] < p.ad[b]; });
  for (std::size_t i = 0; i < p.order.size(); i++)
    if (i == 0 || p.ad[p.order[i]] != p.ad[p.order[i - 1]]) {
      p.seg_start.push_back(static_cast<int32_t>(i));
      p.seg_ad.push_back(p.ad[p.order[i]]);
      p.distinct.push_back(p.ad[p.order[i]]);
    }
  p.seg_start.push_back(static_cast<int32_t>(p.order.size()));
  for (int r = 0; r < N; r++)  // then the rows of none, as AdapterRegistry::plan lists them
    if (p.ad[r] < 0) p.order.push_back(r);
  return p;
}
inline Plan random_plan(int N, int slots, std::mt19937& rng) {
  std::vector<int32_t> ad(N);
  for (auto& a : ad) a = std::max(static_cast<int32_t>(rng() % (slots + 2)) - 2, -1);
  return plan_of(std::move(ad));
}

inline LoraParams params(float* y, const float* x, const Tables& t, const Plan& pl, float* v, int N,
                         int K, int Nout) {
  LoraParams p{y, x, pl.ad.data(), t.tab.data(), static_cast<int>(t.tab.size()), v, N, K, Nout, 16};
  p.order = pl.order.data(), p.seg_start = pl.seg_start.data(), p.seg_ad = pl.seg_ad.data();
  p.n_seg = static_cast<int>(pl.seg_ad.size());
  return p;
}
// One linear's random case: N = 37 rows of x (N, K) and y (N, Nout) over a random table and
// plan, and the oracle's y + deltas.
struct Case {
  Tables t;
  int N = 37;
  std::vector<float> x, y, want;
  Plan pl;
};
inline Case random_case(int K, int Nout, std::mt19937& rng, std::normal_distribution<float>& g) {
  Case c;
  c.t = random_tables(K, Nout, rng, g);
  c.x.resize(std::size_t(c.N) * K);
  c.y.resize(std::size_t(c.N) * Nout);
  for (auto& v : c.x) v = g(rng);
  for (auto& v : c.y) v = g(rng);
  c.pl = random_plan(c.N, static_cast<int>(c.t.tab.size()), rng);
  c.want = c.y;
  servekit::kernels::ref::lora_gathered(c.want.data(), c.x.data(), c.pl.ad.data(), c.t.tab, c.N, K,
                                        Nout);
  return c;
}
// The oracle tests' cases, one seed: K past one pass of the segmented shrink (1024 values),
// ranks past one register chunk (8), at least 5 distinct slots in each plan.
template <class F>
void each_case(F check) {
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.f, 0.5f);
  for (auto [K, Nout] : {std::pair{64, 192}, std::pair{1100, 70}}) {
    INFO("K = " << K << ", Nout = " << Nout);
    const Case c = random_case(K, Nout, rng, g);
    REQUIRE(c.pl.distinct.size() >= 5);
    check(K, Nout, c);
  }
}
}  // namespace lora_test
