// SPDX-License-Identifier: Apache-2.0
// The tensor-core segmented LoRA kernels (kernels/lora_mma.hpp), fp16 and bf16 adapters: the
// deltas of an oracle in double precision on the same 16-bit values, for ragged batches of
// adapters of ranks 1..24 (two passes of 16 ranks), rows without one and an adapter that skips
// the linear; a row's bits whatever shares its segment; a delta buffer written as a zeroed one is
// added to. Run by the emulator (test_kernels) and, compiled by nvcc, by a GPU
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
#include "servekit/core/dtype.hpp"
#include "servekit/lora/policy.hpp"
#include "servekit/weights/policy.hpp"
#include "test_kernels_support.hpp"

namespace sk = servekit;
using device_test::DeviceOps;
using device_test::on;
using namespace lora_test;

namespace {
template <class Fmt>
constexpr bool kBf16 = std::is_same_v<Fmt, sk::weights::BF16>;
template <class Fmt>
std::uint16_t bits16(float f) {
  if constexpr (kBf16<Fmt>)
    return sk::float_to_bf16(f).bits;
  else
    return sk::float_to_half(f).bits;
}
template <class Fmt>
float round16(float f) {
  if constexpr (kBf16<Fmt>)
    return sk::bf16_to_float(sk::float_to_bf16(f));
  else
    return sk::half_to_float(sk::float_to_half(f));
}
// The unit roundoff of the 16-bit format: v is rounded to it on its way into the expand.
template <class Fmt>
constexpr double kU16 = kBf16<Fmt> ? 0x1p-8 : 0x1p-11;

// One linear's adapters of ranks 1..24 (slot 4 skips the linear), their values 16-bit ones.
template <class Fmt>
Tables tables16(int K, int Nout, std::mt19937& rng, std::normal_distribution<float>& g) {
  Tables t = random_tables(K, Nout, rng, g, {1, 3, 8, 16, 5, 24, 2, 9});
  for (auto& s : t.store)
    for (float& v : s) v = round16<Fmt>(v);
  return t;
}
// A table's a16 (rank, K) and b16 (Nout, rank rounded up to even) in device memory, and the
// table of their device pointers (a and b left null: only the 16-bit copies are there).
template <class Fmt>
struct DeviceTables16 {
  std::vector<sk::simt::DeviceBuffer<std::uint16_t>> mats;
  sk::simt::DeviceBuffer<LoraMats> tab;
  DeviceTables16(const Tables& t, int K, int Nout) {
    std::vector<LoraMats> dev;
    for (const LoraMats& m : t.tab) {
      LoraMats d{.rank = m.rank, .scale = m.scale};
      if (m.a) {
        const int R = m.rank, R2 = R + R % 2;
        std::vector<std::uint16_t> a(std::size_t(R) * K), b(std::size_t(Nout) * R2, 0);
        for (std::size_t i = 0; i < a.size(); i++) a[i] = bits16<Fmt>(m.a[i]);
        for (int n = 0; n < Nout; n++)
          for (int j = 0; j < R; j++)
            b[std::size_t(n) * R2 + j] = bits16<Fmt>(m.b[std::size_t(n) * R + j]);
        d.a16 = mats.emplace_back(std::span<const std::uint16_t>(a)).data();
        d.b16 = mats.emplace_back(std::span<const std::uint16_t>(b)).data();
      }
      dev.push_back(d);
    }
    tab = sk::simt::DeviceBuffer<LoraMats>(std::span<const LoraMats>(dev));
  }
};

constexpr int kMaxRank = 24;

// y after the segmented kernels on rows `rows` of x (each row's slot ad[row]), y's rows as
// given: added to, or written (lora_into) over them.
template <class Fmt>
std::vector<float> run(const Tables& t, const std::vector<float>& x, const std::vector<float>& y,
                       const std::vector<int32_t>& ad, const std::vector<int>& rows, int K,
                       int Nout, bool into) {
  const int n = static_cast<int>(rows.size());
  std::vector<float> xs, ys;
  std::vector<int32_t> ads;
  for (int r : rows) {
    xs.insert(xs.end(), x.begin() + std::size_t(r) * K, x.begin() + std::size_t(r + 1) * K);
    ys.insert(ys.end(), y.begin() + std::size_t(r) * Nout, y.begin() + std::size_t(r + 1) * Nout);
    ads.push_back(ad[r]);
  }
  const Plan pl = plan_of(ads);
  // garbage the shrink overwrites: a slice of (n, kMaxRank) for each part of K
  std::vector<float> v(std::size_t(sk::kernels::lora_mma_parts(K)) * n * kMaxRank, -1e30f);
  std::vector<int32_t> arrivals(std::size_t(n) * 2, 0);  // (n, ceil(kMaxRank / 16))
  {
    const DeviceTables16<Fmt> dt(t, K, Nout);
    auto y_d = on(ys), v_d = on(v);
    auto arrivals_d = on(arrivals);
    auto x_d = on(std::as_const(xs));
    auto ad_d = on(std::as_const(pl.ad)), order_d = on(std::as_const(pl.order)),
         start_d = on(std::as_const(pl.seg_start)), seg_d = on(std::as_const(pl.seg_ad));
    LoraParams p{y_d, x_d, ad_d, dt.tab.data(), static_cast<int>(t.tab.size()),
                 v_d, n,   K,    Nout,          kMaxRank};
    p.order = order_d, p.seg_start = start_d, p.seg_ad = seg_d;
    p.n_seg = static_cast<int>(pl.seg_ad.size());
    p.arrivals = arrivals_d;
    if (into)
      DeviceOps::lora_into<sk::lora::Segmented, Fmt>(p, pl.distinct);
    else
      DeviceOps::lora<sk::lora::Segmented, Fmt>(p, pl.distinct);
  }  // ys and the counters come back here
  // The last block of each chunk set its counter back: the next launch (or a graph's replay)
  // finds them at zero.
  for (std::size_t i = 0; i < arrivals.size(); i++) {
    INFO("counter " << i);
    REQUIRE(arrivals[i] == 0);
  }
  return ys;
}

// A ragged batch of 70 rows over the table: x's values 16-bit ones, as the kernels round them.
template <class Fmt>
struct Case16 {
  int K, Nout, N = 70;
  Tables t;
  std::vector<float> x, y;
  std::vector<int32_t> ad;
  std::vector<int> all;
  Case16(int K_, int Nout_, std::mt19937& rng) : K(K_), Nout(Nout_) {
    std::normal_distribution<float> g(0.f, 0.5f);
    t = tables16<Fmt>(K, Nout, rng, g);
    x.resize(std::size_t(N) * K), y.resize(std::size_t(N) * Nout);
    for (auto& v : x) v = round16<Fmt>(g(rng));
    for (auto& v : y) v = g(rng);
    ad = random_plan(N, static_cast<int>(t.tab.size()), rng).ad;
    for (int r = 0; r < N; r++) all.push_back(r);
  }
};

template <class Fmt, class F>
void each_case16(F check) {
  std::mt19937 rng(7);
  // K of one part (its 4 k16 steps on one warp) and of 69 steps (five parts added by the last
  // to arrive; the last of 5 steps, warps of 4, 1, 0 and 0); Nout of a partial n8 tile and of
  // a partial block of 128 columns.
  for (auto [K, Nout] : {std::pair{64, 200}, std::pair{1104, 70}}) {
    INFO("K = " << K << ", Nout = " << Nout);
    check(Case16<Fmt>(K, Nout, rng));
  }
}
}  // namespace

TEMPLATE_TEST_CASE("tensor-core segmented LoRA gives the deltas of its 16-bit values",
                   "[lora][emulated]", sk::weights::F16, sk::weights::BF16) {
  each_case16<TestType>([&](const Case16<TestType>& c) {
    const int K = c.K, Nout = c.Nout;
    const auto got = run<TestType>(c.t, c.x, c.y, c.ad, c.all, K, Nout, false);
    // The oracle in double on the same values. The kernels' error: fp32 sums of K products and
    // of 16 ranks a pass (tensor cores may truncate rather than round as they add: u = 2^-23),
    // four part sums, the scale, two passes and y's add, within (K + 24) u (|y| + m); and v's
    // rounding to 16 bits, within u16 m; m = sum_j |scale B_nj| (|A_j| |x|). A lost, doubled or
    // misplaced term is off by the term itself, far past it.
    float worst = 0;
    for (int r = 0; r < c.N; r++) {
      const int a = c.ad[r];
      const LoraMats* m = a >= 0 && c.t.tab[a].a ? &c.t.tab[a] : nullptr;
      std::vector<double> v(m ? m->rank : 0), mv(v.size());
      for (std::size_t j = 0; j < v.size(); j++)
        for (int k = 0; k < K; k++) {
          const double p = double(m->a[j * K + k]) * c.x[std::size_t(r) * K + k];
          v[j] += m->scale * p, mv[j] += std::abs(m->scale * p);
        }
      for (int n = 0; n < Nout; n++) {
        const std::size_t i = std::size_t(r) * Nout + n;
        double want = c.y[i], mag = 0;
        for (std::size_t j = 0; j < v.size(); j++) {
          want += m->b[n * v.size() + j] * v[j];
          mag += std::abs(double(m->b[n * v.size() + j])) * mv[j];
        }
        const double bound =
            (K + 24) * 0x1p-23 * (std::abs(double(c.y[i])) + mag) + kU16<TestType> * mag;
        if (!m) {  // no adapter, or one that skips the linear: untouched
          REQUIRE(got[i] == c.y[i]);
          continue;
        }
        worst = std::max(worst, static_cast<float>(std::abs(got[i] - want) / bound));
      }
    }
    INFO("worst error: " << worst << " of the bound");
    CHECK(worst <= 1.f);
  });
}

// A row's sums never meet another row's, and every row goes through the tensor cores: alone in
// its segment, at another place in a tile, it gets the bits it gets in the batch.
TEMPLATE_TEST_CASE("tensor-core segmented LoRA: a row's bits whatever shares its segment",
                   "[lora][emulated]", sk::weights::F16, sk::weights::BF16) {
  each_case16<TestType>([&](const Case16<TestType>& c) {
    const auto whole = run<TestType>(c.t, c.x, c.y, c.ad, c.all, c.K, c.Nout, false);
    std::vector<int> some;  // every fifth row, backwards: each at another place in its segment
    for (int r = c.N - 1; r >= 0; r -= 5) some.push_back(r);
    const auto part = run<TestType>(c.t, c.x, c.y, c.ad, some, c.K, c.Nout, false);
    for (std::size_t s = 0; s < some.size(); s++) {
      const int r = some[s];
      const auto one = run<TestType>(c.t, c.x, c.y, c.ad, {r}, c.K, c.Nout, false);
      for (int n = 0; n < c.Nout; n++) {
        INFO("row " << r << " (slot " << c.ad[r] << "), column " << n);
        const uint32_t w = std::bit_cast<uint32_t>(whole[std::size_t(r) * c.Nout + n]);
        REQUIRE(std::bit_cast<uint32_t>(part[s * c.Nout + n]) == w);
        REQUIRE(std::bit_cast<uint32_t>(one[n]) == w);
      }
    }
  });
}

// A step's delta buffer (lora_into: LoraParams::write): over garbage, the bits the deltas get
// added into zeros, and +0 for the rows without one or whose adapter skips the linear.
TEMPLATE_TEST_CASE("tensor-core segmented LoRA writes a delta buffer as a zeroed one is added to",
                   "[lora][emulated]", sk::weights::F16, sk::weights::BF16) {
  each_case16<TestType>([&](const Case16<TestType>& c) {
    std::vector<float> garbage(c.y.size(), std::nanf("")), zeros(c.y.size(), 0.f);
    garbage[3] = -0.f, garbage[5] = 1e30f;
    const auto written = run<TestType>(c.t, c.x, garbage, c.ad, c.all, c.K, c.Nout, true);
    const auto added = run<TestType>(c.t, c.x, zeros, c.ad, c.all, c.K, c.Nout, false);
    for (std::size_t i = 0; i < written.size(); i++) {
      INFO("output " << i << ", row " << i / c.Nout << " (slot " << c.ad[i / c.Nout] << ")");
      REQUIRE(std::bit_cast<uint32_t>(written[i]) == std::bit_cast<uint32_t>(added[i]));
    }
  });
}

// K must come in whole k16 steps, a K of several parts needs the counters, and x's rows must
// start 8-byte aligned: anything else is refused, naming the launcher and what is at fault.
TEST_CASE(
    "tensor-core segmented LoRA refuses a K of partial k16 steps, parts without counters, or a "
    "misaligned x",
    "[lora][emulated]") {
  std::vector<float> f(64, 0.f);
  std::vector<int32_t> i(4, 0);
  LoraParams p{f.data(), f.data(), i.data(), nullptr, 1, f.data(), 1, 40, 8, 8};
  p.order = i.data(), p.seg_start = i.data(), p.seg_ad = i.data(), p.n_seg = 1;
  auto call = [&] { DeviceOps::lora<sk::lora::Segmented, sk::weights::F16>(p, {}); };
  REQUIRE_THROWS_WITH(call(), Catch::Contains("lora_segmented_mma") && Catch::Contains("K = 40"));
  p.K = 512;  // two parts, no counters
  REQUIRE_THROWS_WITH(call(), Catch::Contains("lora_segmented_mma") && Catch::Contains("K = 512") &&
                                  Catch::Contains("counters"));
  p.K = 64, p.x = f.data() + 1;  // a float past an aligned start
  REQUIRE_THROWS_WITH(call(), Catch::Contains("lora_segmented_mma") && Catch::Contains("x is not"));
}
