// SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers of the emulated kernel tests: random inputs, NaN-poisoned outputs, and a comparison
// that reports the first element out of tolerance (an unwritten, still-NaN element fails it).
#include <bit>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "servekit/kernels/split_k_args.hpp"
#include "servekit/simt/counters.hpp"
#include "servekit/simt/memory.hpp"

namespace kernels_test {

inline std::vector<float> random_floats(std::size_t n, std::mt19937& rng, float lo = -1.f,
                                        float hi = 1.f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline std::vector<float> poisoned(std::size_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

// |got - want| <= tol(i) for every i; a NaN on either side fails.
template <class Tol>
void require_close(std::span<const float> got, std::span<const float> want, Tol tol) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0, first = got.size();
  float worst = 0.f;
  for (std::size_t i = 0; i < got.size(); i++) {
    const float err = std::abs(got[i] - want[i]);
    if (!(err <= tol(i))) {
      if (bad++ == 0) first = i;
      worst = std::isnan(err) ? err : std::max(worst, err);
    }
  }
  INFO(bad << " of " << got.size() << " elements out of tolerance; first at " << first << " (got "
           << (first < got.size() ? got[first] : 0.f) << ", want "
           << (first < got.size() ? want[first] : 0.f) << "), worst error " << worst);
  REQUIRE(bad == 0);
}

// abs + |ref| x rel: the fp32 paths differ from the reference only in summation order.
inline void require_close(std::span<const float> got, std::span<const float> want,
                          float abs = 1e-5f, float rel = 1e-5f) {
  require_close(got, want, [&](std::size_t i) { return abs + std::abs(want[i]) * rel; });
}

// Floats that differ, bit for bit, between the rows of one M-row reference call and the same
// rows computed in calls of 1, 3, 8, 9 and 17 rows at other offsets, and in a second call of all
// M rows. run(out, r0, n, reference) writes rows [r0, r0 + n) of an (M, N) result into out
// (reference: the first call, which a test may launch differently, e.g. without a split-K
// scratch): the kernels must not let a row's bits depend on the others or on the launch.
template <class Run>
std::size_t row_bits_differ(int M, int N, Run&& run) {
  auto all = poisoned(static_cast<std::size_t>(M) * N);
  run(all.data(), 0, M, true);
  std::size_t differ = 0;
  auto compare = [&](int r0, int n_rows) {
    auto part = poisoned(static_cast<std::size_t>(n_rows) * N);
    run(part.data(), r0, n_rows, false);
    for (std::size_t i = 0; i < part.size(); i++)
      differ += std::bit_cast<uint32_t>(part[i]) !=
                std::bit_cast<uint32_t>(all[static_cast<std::size_t>(r0) * N + i]);
  };
  for (int n_rows : {1, 3, 8, 9, 17})
    for (int r0 = 0; r0 + n_rows <= M; r0 += n_rows + 2) compare(r0, n_rows);
  compare(0, M);
  return differ;
}

// A split-K scratch (kernels::SplitK) with room for every launch of a test, and what the
// launches logged while it lived: how many shared K among blocks (grid.y for the GEMV, grid.z
// for the tiled and tensor-core kernels, whose grid.y counts row tiles).
struct SplitScratch {
  // Device memory (host memory under the emulator): a GPU's kernels write it.
  servekit::simt::DeviceBuffer<float> partial{std::size_t{1} << 22};
  servekit::simt::DeviceBuffer<int32_t> arrivals{4096};
  servekit::simt::LaunchLog log;
  SplitScratch() {
    partial.fill_bytes(0);
    arrivals.fill_bytes(0);  // each tile's counter starts at zero, and its last block resets it
  }
  servekit::kernels::SplitK get() {
    return {partial.data(), arrivals.data(), partial.size(), static_cast<int>(arrivals.size())};
  }
  int split_launches() {
    int n = 0;
    for (const auto& r : log.take())
      n += r.grid.z > 1 || (r.kernel.find("gemv") != std::string::npos && r.grid.y > 1);
    return n;
  }
  // Every last block set its counter back.
  bool counters_at_zero() const {
    std::vector<int32_t> a(arrivals.size());
    arrivals.download(a);
    for (int32_t v : a)
      if (v != 0) return false;
    return true;
  }
  // The launches logged since the last take: some split, and left the counters at zero, when
  // the test handed them this scratch (split); none split otherwise.
  void check(bool split) {
    const int splits = split_launches();
    if (split) {
      CHECK(splits > 0);
      CHECK(counters_at_zero());
    } else {
      CHECK(splits == 0);
    }
  }
};

}  // namespace kernels_test
