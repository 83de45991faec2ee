// SPDX-License-Identifier: Apache-2.0
// The multiply-and-shift division of a paged cache's row lookups (core/divider.hpp) against the
// hardware's division: every quotient the lookups can ask for, for block sizes that are powers
// of two and ones that are not, and the lookups themselves against row / B, row % B.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "servekit/core/divider.hpp"
#include "servekit/kv/view.hpp"

namespace sk = servekit;

TEST_CASE("a Divider's quotient is n / d for every n below 2^31", "[kv][divider]") {
  std::mt19937_64 rng(7);
  std::vector<int32_t> divisors;
  for (int32_t d = 1; d <= 1024; d++) divisors.push_back(d);
  for (int32_t d : {4095, 4096, 4097, 65535, 65536, 65537, 1000003, 0x3fffffff, 0x40000000,
                    0x40000001, 0x7ffffffe, 0x7fffffff})
    divisors.push_back(d);
  for (int i = 0; i < 200; i++) divisors.push_back(static_cast<int32_t>(1 + rng() % 0x7fffffff));
  for (const int32_t d : divisors) {
    const sk::Divider div(d);
    // Around every multiple of d near 0 and near 2^31, where a rounding error would show first.
    std::vector<int32_t> ns = {0, 1, 2, 0x7fffffff, 0x7ffffffe};
    for (int64_t q :
         {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{0x7fffffff} / d - 1, int64_t{0x7fffffff} / d})
      for (int64_t e = -1; e <= 1; e++)
        if (const int64_t n = q * d + e; n >= 0 && n <= 0x7fffffff)
          ns.push_back(static_cast<int32_t>(n));
    for (int i = 0; i < 2000; i++) ns.push_back(static_cast<int32_t>(rng() % 0x80000000u));
    for (int32_t n = 0; n < 5000; n++) ns.push_back(n);
    int wrong = 0;
    int32_t first = -1;
    for (const int32_t n : ns)
      if (div.quot(n) != n / d && wrong++ == 0) first = n;
    INFO("divisor " << d << ", first wrong n " << first);
    CHECK(wrong == 0);
  }
}

TEST_CASE("a paged view finds row t of a slot in block table[t / B] at row t % B",
          "[kv][divider]") {
  for (const int B : {1, 3, 4, 16, 17, 128}) {
    constexpr int kSlots = 3, kC = 8;
    const int stride = (1000 + B - 1) / B;
    std::vector<int32_t> table(static_cast<std::size_t>(kSlots) * stride);
    for (std::size_t i = 0; i < table.size(); i++)
      table[i] = static_cast<int32_t>((i * 7919) % table.size());  // blocks out of order
    const sk::kv::PagedView<float> view{nullptr, nullptr, table.data(), stride, B, kC};
    for (int s = 0; s < kSlots; s++)
      for (int t = 0; t < 1000; t++) {
        const int64_t want =
            (static_cast<int64_t>(table[static_cast<std::size_t>(s) * stride + t / B]) * B +
             t % B) *
            kC;
        REQUIRE(view.offset(s, t) == want);
      }
  }
}
