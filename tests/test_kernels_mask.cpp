// SPDX-License-Identifier: Apache-2.0
// The token mask kernel (structured generation) against masking on the host.
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "device_mirror.hpp"
#include "servekit/kernels/token_mask.hpp"
#include "test_kernels_support.hpp"

namespace kn = servekit::kernels;
using Catch::Contains;
using device_test::on;

TEST_CASE("mask_logits sets exactly the refused tokens of the masked rows to -inf",
          "[constrain][emulated]") {
  std::mt19937 rng(3);
  const int M = 5, V = 1003, W = (V + 31) / 32;  // V not a multiple of 32
  std::vector<float> x(std::size_t(M) * V);
  for (auto& v : x) v = std::uniform_real_distribution<float>(-3.f, 3.f)(rng);
  // Slot 1 names no row (-1): a graphed step launches a slot per sequence, masked or not.
  const std::vector<int32_t> rows = {1, -1, 3, 4};
  std::vector<uint32_t> words(rows.size() * W);
  for (auto& w : words) w = static_cast<uint32_t>(rng());
  std::vector<float> want = x;
  for (std::size_t k = 0; k < rows.size(); k++)
    for (int v = 0; v < V && rows[k] >= 0; v++)
      if (!(words[k * W + v / 32] >> (v % 32) & 1)) want[std::size_t(rows[k]) * V + v] = -INFINITY;
  std::vector<float> got = x;
  kn::mask_logits({on(got), on(words), on(rows), static_cast<int>(rows.size()), M, V});
  std::size_t differ = 0;
  for (std::size_t i = 0; i < got.size(); i++)
    differ += std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i]);
  CHECK(differ == 0);
  REQUIRE_THROWS_WITH(kn::mask_logits({on(got), on(words), on(rows), 0, M, V}), Contains("n = 0"));
}
