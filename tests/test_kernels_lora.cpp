// SPDX-License-Identifier: Apache-2.0
// The device LoRA kernels (kernels/lora.hpp) through each dispatch policy: the gathered (BGMV),
// segmented (SGMV) and loop kernels give the host oracle's deltas for ragged batches of adapters
// of ranks 1..16, rows without one and an adapter that skips the linear, whose rows stay
// untouched. Run by the emulator (test_kernels) and, compiled by nvcc, by a GPU
// (test_kernels_cuda).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "device_mirror.hpp"
#include "device_ops.hpp"
#include "lora_tables.hpp"
#include "servekit/kernels/ref/lora.hpp"
#include "servekit/lora/policy.hpp"
#include "test_kernels_support.hpp"

namespace sk = servekit;
using device_test::DeviceOps;
using device_test::on;
using namespace lora_test;

namespace {
// A table's A (rank, K) and B (Nout, rank) in device memory and the table of their device
// pointers (no transposed B: the device kernels read B as it is).
struct DeviceTables {
  std::vector<sk::simt::DeviceBuffer<float>> mats;
  sk::simt::DeviceBuffer<LoraMats> tab;
  DeviceTables(const Tables& t, int K, int Nout) {
    std::vector<LoraMats> dev;
    for (const LoraMats& m : t.tab) {
      LoraMats d{.rank = m.rank, .scale = m.scale};
      if (m.a) {
        const std::size_t r = static_cast<std::size_t>(m.rank);
        d.a = mats.emplace_back(std::span<const float>(m.a, r * K)).data();
        d.b = mats.emplace_back(std::span<const float>(m.b, r * Nout)).data();
      }
      dev.push_back(d);
    }
    tab = sk::simt::DeviceBuffer<LoraMats>(std::span<const LoraMats>(dev));
  }
};
// (K + 16 + 2) u (|y| + |scale| |B| (|A| |x|)) for each output: the forward error bound of the
// delta's float arithmetic (dot products of K and of at most 16 terms, a scale, an add).
std::vector<float> error_bound(const Tables& t, const std::vector<float>& x,
                               const std::vector<float>& y, const std::vector<int32_t>& ad, int N,
                               int K, int Nout) {
  const double u = std::ldexp(1.0, -24), gamma = (K + 16 + 2) * u;
  std::vector<float> out(y.size());
  for (int r = 0; r < N; r++) {
    const LoraMats* m = ad[r] >= 0 && t.tab[ad[r]].a ? &t.tab[ad[r]] : nullptr;
    std::vector<double> ax(m ? m->rank : 0, 0.0);  // |A| |x_r|
    for (std::size_t j = 0; j < ax.size(); j++)
      for (int k = 0; k < K; k++)
        ax[j] += std::abs(double(m->a[j * K + k]) * x[std::size_t(r) * K + k]);
    for (int n = 0; n < Nout; n++) {
      double mag = std::abs(double(y[std::size_t(r) * Nout + n]));
      for (std::size_t j = 0; j < ax.size(); j++)
        mag += std::abs(double(m->scale) * m->b[n * ax.size() + j]) * ax[j];
      // The smallest normal float keeps an exact zero's bound above zero.
      out[std::size_t(r) * Nout + n] = static_cast<float>(std::max(gamma * mag, 1e-38));
    }
  }
  return out;
}
// y after call(p) on the device, p the launch parameters of case c with c's tables, x and plan
// uploaded, y as given and the shrink's scratch garbage the kernels must overwrite.
template <class Call>
std::vector<float> on_device(const Case& c, int K, int Nout, std::vector<float> y, Call&& call) {
  const Plan& pl = c.pl;
  std::vector<float> v(std::size_t(c.N) * 16, -1e30f);
  const DeviceTables dt(c.t, K, Nout);
  {
    auto y_d = on(y), v_d = on(v);
    auto x_d = on(std::as_const(c.x));
    auto ad_d = on(std::as_const(pl.ad)), order_d = on(std::as_const(pl.order)),
         start_d = on(std::as_const(pl.seg_start)), seg_d = on(std::as_const(pl.seg_ad));
    LoraParams p{y_d, x_d, ad_d, dt.tab.data(), static_cast<int>(c.t.tab.size()),
                 v_d, c.N, K,    Nout,          16};
    p.order = order_d, p.seg_start = start_d, p.seg_ad = seg_d;
    p.n_seg = static_cast<int>(pl.seg_ad.size());
    call(p);
  }  // y comes back here
  return y;
}
}  // namespace

TEMPLATE_TEST_CASE("device LoRA kernels give the host oracle's deltas", "[lora][emulated]",
                   sk::lora::Loop, sk::lora::Gathered, sk::lora::Segmented) {
  each_case([&](int K, int Nout, const Case& c) {
    const Tables& t = c.t;
    const Plan& pl = c.pl;
    const int N = c.N;
    const auto &x = c.x, &y = c.y, &want = c.want;
    const auto& ad = pl.ad;
    const auto got = on_device(
        c, K, Nout, y, [&](const LoraParams& p) { DeviceOps::lora<TestType>(p, pl.distinct); });
    // Against the oracle within the bound of float arithmetic on these sums, whatever their
    // order or contraction (the tree and FMAs the GPU takes differ from the emulator's): each
    // output's error at most (K + rank + 2) u times the same expression over absolute values
    // (u = 2^-24). A lost, doubled or misscaled term is off by the term itself, far past it.
    const std::vector<float> bound = error_bound(t, x, y, ad, N, K, Nout);
    float worst = 0;  // error / bound
    for (std::size_t i = 0; i < y.size(); i++)
      worst = std::max(worst, std::abs(got[i] - want[i]) / bound[i]);
    INFO("worst error: " << worst << " of the bound");
    CHECK(worst <= 1.f);
    // Rows without an adapter, or whose adapter skips this linear, are untouched, bit for bit.
    for (int r = 0; r < N; r++)
      if (ad[r] < 0 || ad[r] == 4)
        for (int n = 0; n < Nout; n++)
          REQUIRE(got[std::size_t(r) * Nout + n] == y[std::size_t(r) * Nout + n]);
  });
}

// Segmented's kernels sum each row as gathered's do (ranks up to kSegExpandRanks; these are
// 1..16): the two dispatches give the same bits, so a row's delta does not depend on which
// policy serves it nor on the rows that share its adapter.
TEST_CASE("segmented LoRA gives the gathered kernels' bits", "[lora][emulated]") {
  each_case([&](int K, int Nout, const Case& c) {
    auto run = [&]<class Policy>() {
      return on_device(c, K, Nout, c.y,
                       [&](const LoraParams& p) { DeviceOps::lora<Policy>(p, c.pl.distinct); });
    };
    const auto g = run.template operator()<sk::lora::Gathered>();
    const auto s = run.template operator()<sk::lora::Segmented>();
    for (std::size_t i = 0; i < g.size(); i++) {
      INFO("output " << i << " of " << g.size());
      REQUIRE(std::bit_cast<uint32_t>(g[i]) == std::bit_cast<uint32_t>(s[i]));
    }
  });
}

// A step's delta buffer written by the kernels (lora_into: LoraParams::write for gathered and
// segmented, no zeroing launch; the loop zeroes and adds): over a buffer of garbage, the bits
// the deltas get added into zeros, and +0 for the rows without one or whose adapter skips the
// linear.
TEMPLATE_TEST_CASE("LoRA kernels write a delta buffer: a zeroed buffer's bits, zeros elsewhere",
                   "[lora][emulated]", sk::lora::Loop, sk::lora::Gathered, sk::lora::Segmented) {
  each_case([&](int K, int Nout, const Case& c) {
    const Plan& pl = c.pl;
    const int N = c.N;
    auto run = [&](std::vector<float> y, bool into) {
      return on_device(c, K, Nout, std::move(y), [&](const LoraParams& p) {
        if (into)
          DeviceOps::lora_into<TestType>(p, pl.distinct);
        else
          DeviceOps::lora<TestType>(p, pl.distinct);
      });
    };
    std::vector<float> garbage(std::size_t(N) * Nout, std::nanf("")), zeros(garbage.size(), 0.f);
    garbage[3] = -0.f, garbage[5] = 1e30f;
    const auto written = run(garbage, true), added = run(zeros, false);
    for (std::size_t i = 0; i < written.size(); i++) {
      INFO("output " << i << ", row " << i / Nout << " (slot " << pl.ad[i / Nout] << ")");
      REQUIRE(std::bit_cast<uint32_t>(written[i]) == std::bit_cast<uint32_t>(added[i]));
    }
  });
}

// A segment longer than a block's rows (kernels::kSegRows) is cut into chunks, each a block:
// every row still gets its delta, and the bits it gets alone, whichever chunk holds it.
TEST_CASE("segmented LoRA: a long segment's rows get the bits they get in a short one",
          "[lora][emulated]") {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.f, 0.5f);
  constexpr int K = 64, Nout = 192, N = 2 * sk::kernels::kSegRows + 22;
  const Tables t = random_tables(K, Nout, rng, g);
  const int slots = static_cast<int>(t.tab.size());
  std::vector<float> x(std::size_t(N) * K), y(std::size_t(N) * Nout);
  for (auto& v : x) v = g(rng);
  for (auto& v : y) v = g(rng);
  // run(rows): y + the deltas of rows `rows` of x, all on adapter 3 (rank 16; one segment), row by
  // row.
  auto run = [&](const std::vector<int>& rows, int seg_rows) {
    const int n = static_cast<int>(rows.size());
    std::vector<float> xs, ys;
    for (int r : rows) {
      xs.insert(xs.end(), x.begin() + std::size_t(r) * K, x.begin() + std::size_t(r + 1) * K);
      ys.insert(ys.end(), y.begin() + std::size_t(r) * Nout, y.begin() + std::size_t(r + 1) * Nout);
    }
    const Plan pl = plan_of(std::vector<int32_t>(n, 3));
    std::vector<float> v(std::size_t(n) * 16, -1e30f);
    {
      const DeviceTables dt(t, K, Nout);
      auto y_d = on(ys), v_d = on(v);
      auto x_d = on(std::as_const(xs));
      auto ad_d = on(pl.ad), order_d = on(std::as_const(pl.order)),
           start_d = on(std::as_const(pl.seg_start)), seg_d = on(std::as_const(pl.seg_ad));
      LoraParams p{y_d, x_d, ad_d, dt.tab.data(), slots, v_d, n, K, Nout, 16};
      p.order = order_d, p.seg_start = start_d, p.seg_ad = seg_d, p.n_seg = 1;
      p.seg_rows = seg_rows;
      DeviceOps::lora<sk::lora::Segmented>(p, pl.distinct);
    }
    return ys;
  };
  std::vector<int> all(N), few;
  for (int r = 0; r < N; r++) all[r] = r;
  for (int r : {0, 1, 63, 64, 65, 127, 128, N - 1}) few.push_back(r);
  const auto whole = run(all, N), also = run(all, 0), alone = run(few, 8);
  // Every row has its delta: against the oracle within the float bound.
  std::vector<float> want = y;
  const Plan pl = plan_of(std::vector<int32_t>(N, 3));
  sk::kernels::ref::lora_gathered(want.data(), x.data(), pl.ad.data(), t.tab, N, K, Nout);
  const std::vector<float> bound = error_bound(t, x, y, pl.ad, N, K, Nout);
  float worst = 0;
  for (std::size_t i = 0; i < y.size(); i++)
    worst = std::max(worst, std::abs(whole[i] - want[i]) / bound[i]);
  INFO("worst error: " << worst << " of the bound");
  CHECK(worst <= 1.f);
  CHECK(whole == also);  // the longest segment given or taken as N
  for (std::size_t i = 0; i < few.size(); i++)
    for (int n = 0; n < Nout; n++) {
      INFO("row " << few[i] << ", column " << n);
      REQUIRE(std::bit_cast<uint32_t>(whole[std::size_t(few[i]) * Nout + n]) ==
              std::bit_cast<uint32_t>(alone[i * Nout + n]));
    }
}
