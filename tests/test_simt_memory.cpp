// SPDX-License-Identifier: Apache-2.0
// The memory and stream layer: buffers, copies, memset, events.
#include <catch2/catch.hpp>

#include <cstdint>
#include <span>
#include <vector>

#include "servekit/simt/simt.hpp"

namespace simt = servekit::simt;

TEST_CASE("DeviceBuffer round-trips, moves, and checks sizes", "[simt]") {
  std::vector<float> x(1001);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.5f * static_cast<float>(i) - 3.0f;
  simt::DeviceBuffer<float> a{std::span<const float>(x)};
  REQUIRE(a.size() == x.size());
  REQUIRE(reinterpret_cast<std::uintptr_t>(a.data()) % 256 == 0);
  simt::DeviceBuffer<float> b = std::move(a);
  REQUIRE(a.data() == nullptr);
  std::vector<float> y(x.size());
  b.download(y);
  REQUIRE(y == x);
  std::vector<float> wrong(7);
  REQUIRE_THROWS_WITH(b.download(wrong), Catch::Contains("1001") && Catch::Contains("7"));
  REQUIRE_THROWS_WITH(b.upload(wrong), Catch::Contains("7 elements"));
}

TEST_CASE("memset and raw copies", "[simt]") {
  std::uint32_t* p = simt::malloc_device<std::uint32_t>(33);
  simt::memset_device(p, 0xab, 33);
  std::vector<std::uint32_t> h(33);
  simt::copy_to_host(h.data(), p, 33);
  for (auto v : h) REQUIRE(v == 0xababababu);
  const std::vector<std::uint32_t> src{1, 2, 3};
  simt::copy_to_device(p + 30, src.data(), 3);
  simt::copy_to_host(h.data(), p, 33);
  REQUIRE(h[29] == 0xababababu);
  REQUIRE(h[30] == 1);
  REQUIRE(h[32] == 3);
  simt::free_device(p);
  REQUIRE(simt::malloc_device<float>(0) == nullptr);
}

TEST_CASE("events measure a non-negative time; an unrecorded event is an error", "[simt]") {
  simt::Stream stream;
  simt::Event start, stop, never;
  start.record(stream);
  stop.record(stream);
  stream.synchronize();
  simt::synchronize();
  REQUIRE(elapsed_ms(start, stop) >= 0.0f);
  REQUIRE_THROWS_WITH(elapsed_ms(start, never), Catch::Contains("never recorded"));
}
