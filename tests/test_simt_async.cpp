// SPDX-License-Identifier: Apache-2.0
// cp.async under emulation: a copy lands at the wait that covers its group, not before, so a
// kernel that reads too early reads the shared memory's poison, as a pipelined kernel with a
// wrong wait count would on a GPU some of the time.
#include <catch2/catch.hpp>

#include <bit>
#include <cstdint>
#include <vector>

#include "test_simt_async_kernels.hpp"

namespace simt = servekit::simt;
using namespace simt_test;

#if !defined(__CUDACC__)
namespace {
std::vector<float> run_tiles(const std::vector<float>& src, AsyncRead mode) {
  simt::DeviceBuffer<float> d_src{std::span<const float>(src)}, d_out(256);
  std::vector<float> out(256, 0.f);
  d_out.upload(out);
  simt::launch(simt::kernel<async_tiles>, dim3(1), dim3(32), 0, nullptr, d_src.data(), d_out.data(),
               static_cast<int>(mode));
  d_out.download(out);
  return out;
}
}  // namespace

// What the emulator shows that a GPU does only some of the time: reads before the wait.
TEST_CASE("cp.async: each group lands at the wait that covers it, not before", "[simt][emulator]") {
  std::vector<float> src(256);
  for (int i = 0; i < 256; ++i) src[i] = 0.5f * i + 1.f;
  const auto waited = run_tiles(src, AsyncRead::Waited);
  for (int i = 0; i < 256; ++i) {
    INFO("element " << i);
    REQUIRE(waited[i] == src[i]);
  }
  // The emulator's poison is all-ones bytes: the bits a read of an unlanded copy returns.
  const auto early = run_tiles(src, AsyncRead::BeforeWait);
  for (int i = 0; i < 128; ++i) {
    INFO("tile 0, element " << i << " read before any wait");
    REQUIRE(std::bit_cast<std::uint32_t>(early[i]) == 0xffffffffu);
  }
  const auto pending = run_tiles(src, AsyncRead::NewestPending);
  for (int i = 128; i < 256; ++i) {
    INFO("tile 1, element " << i - 128 << " read after wait<1>, its group the newest");
    REQUIRE(std::bit_cast<std::uint32_t>(pending[i]) == 0xffffffffu);
  }
}
#endif

TEST_CASE("cp.async copies src_bytes and zero-fills the rest of its 16 bytes", "[simt]") {
  alignas(16) unsigned char bytes[16];
  for (int i = 0; i < 16; ++i) bytes[i] = static_cast<unsigned char>(200 + i);
  simt::DeviceBuffer<unsigned char> d_src{std::span<const unsigned char>(bytes, 16)}, d_out(16);
  for (int n : {0, 4, 16}) {
    simt::launch(simt::kernel<async_partial>, dim3(1), dim3(32), 0, nullptr, d_src.data(),
                 d_out.data(), n);
    std::vector<unsigned char> out(16);
    d_out.download(out);
    for (int i = 0; i < 16; ++i) {
      INFO(n << " source bytes, byte " << i);
      REQUIRE(out[i] == (i < n ? bytes[i] : 0));
    }
  }
}

#if !defined(__CUDACC__)
TEST_CASE("cp.async names a misaligned address or a byte count outside 0..16",
          "[simt][errors][emulator]") {
  simt::DeviceBuffer<unsigned char> d_src(32), d_out(16);
  REQUIRE_THROWS_WITH(simt::launch(simt::kernel<async_partial>, dim3(1), dim3(32), 0, nullptr,
                                   d_src.data() + 4, d_out.data(), 16),
                      Catch::Contains("cp_async_16") && Catch::Contains("16-byte aligned"));
  REQUIRE_THROWS_WITH(simt::launch(simt::kernel<async_partial>, dim3(1), dim3(32), 0, nullptr,
                                   d_src.data(), d_out.data(), 17),
                      Catch::Contains("cp_async_16") && Catch::Contains("not 17"));
}

TEST_CASE("the Random schedule lands cp.async copies early: a refill before its barrier shows",
          "[simt][emulator]") {
  const int tiles = 16;
  std::vector<float> src(128 * tiles);
  for (int t = 0; t < tiles; ++t)
    for (int i = 0; i < 128; ++i) src[128 * t + i] = static_cast<float>(3 * t + i % 5);
  float want = 0.f;  // small integers: exact in any order
  for (float v : src) want += v;
  simt::DeviceBuffer<float> d_src{std::span<const float>(src)}, d_out(32);
  auto run = [&](auto kernel, simt::Schedule order) {
    simt::set_schedule(order);
    simt::launch(kernel, dim3(1), dim3(32), 0, nullptr, d_src.data(), d_out.data(), tiles);
    simt::set_schedule({});
    std::vector<float> out(32);
    d_out.download(out);
    int wrong = 0;
    for (float v : out) wrong += v != want;
    return wrong;
  };
  const auto good = simt::kernel<async_pipeline<true>>, racy = simt::kernel<async_pipeline<false>>;
  for (std::uint64_t seed : {1, 2, 3}) {
    INFO("seed " << seed);
    CHECK(run(good, {simt::Order::Random, seed}) == 0);
    // The race: lanes that ran ahead refilled a buffer the others had not read yet.
    CHECK(run(racy, {simt::Order::Random, seed}) > 0);
  }
  // Copies that land only at their wait hide it: every lane is past the barrier by then.
  CHECK(run(good, {simt::Order::Fifo}) == 0);
  CHECK(run(racy, {simt::Order::Fifo}) == 0);
  CHECK(run(racy, {simt::Order::Reverse}) == 0);
}
#endif
