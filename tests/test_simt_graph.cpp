// SPDX-License-Identifier: Apache-2.0
// Stream capture and graph replay (simt/graph.hpp) under the emulator: what is captured runs
// only when the graph does, with the arguments of the capture and the pinned memory of the
// replay; and what a capture cannot hold (a wait, an allocation, a free, a copy back, work on
// another stream, a copy from pageable memory) throws CaptureError, after which the thread is
// no longer capturing.
#include <catch2/catch.hpp>

#include <cstdint>
#include <span>
#include <vector>

#include "servekit/simt/simt.hpp"
#include "test_simt_graph_kernels.hpp"

namespace simt = servekit::simt;

namespace {
constexpr int kN = 300;
void affine(simt::stream_handle s, float* y, const float* x, simt_test::Affine f) {
  simt::launch(simt::kernel<simt_test::affine>, dim3((kN + 127) / 128), dim3(128), 0, s, y, x, f,
               kN);
}
}  // namespace

TEST_CASE("a captured graph runs nothing until launched, then replays its work", "[simt][graph]") {
  simt::Stream stream;
  simt::PinnedBuffer<float> in(kN);
  simt::DeviceBuffer<float> x(kN), y(kN);
  x.fill_bytes(0), y.fill_bytes(0);
  for (int i = 0; i < kN; i++) in.data()[i] = static_cast<float>(i);
  simt_test::Affine f{2.f, 1.f};
  const simt::Counts before = simt::counts();
  simt::Graph g = simt::capture(stream, [&] {
    simt::copy_to_device(x.data(), in.data(), kN, stream.handle());
    affine(stream, y.data(), x.data(), f);
    affine(stream, y.data(), y.data(), {1.f, 0.5f});
  });
  f = {100.f, 100.f};  // the capture copied the kernel's arguments
  REQUIRE(g.nodes() == 3);
  std::vector<float> out(kN);
  y.download(out);
  for (float v : out) REQUIRE(v == 0.f);  // nothing ran
  const simt::Counts captured = simt::counts() - before;
  CHECK(captured.launches == 2);  // issued by the host, not run
  CHECK(captured.h2d == 0);
  for (int round = 0; round < 2; round++) {
    // The copy node reads the pinned buffer as it is when the graph runs.
    for (int i = 0; i < kN; i++) in.data()[i] = static_cast<float>(i + 1000 * round);
    const simt::Counts c0 = simt::counts();
    g.launch(stream);
    const simt::Counts c = simt::counts() - c0;
    CHECK(c.graph_launches == 1);
    CHECK(c.launches == 0);
    CHECK(c.h2d == 1);
    CHECK(c.h2d_bytes == kN * sizeof(float));
    CHECK(c.syncs == 0);
    y.download(out, stream);
    for (int i = 0; i < kN; i++)
      REQUIRE(out[i] == 2.f * static_cast<float>(i + 1000 * round) + 1.f + 0.5f);
  }
  simt::Graph moved = std::move(g);
  REQUIRE(g.empty());
  REQUIRE(moved.nodes() == 3);
  REQUIRE_THROWS_WITH(g.launch(stream), Catch::Contains("empty"));
}

TEST_CASE("what a capture cannot hold throws CaptureError and ends the capture", "[simt][graph]") {
  simt::Stream stream, other;
  simt::DeviceBuffer<float> x(kN), y(kN);
  simt::PinnedBuffer<float> pinned(kN);
  std::vector<float> pageable(kN, 1.f);
  auto rejects = [&](auto&& body, const char* what) {
    INFO(what);
    REQUIRE_THROWS_AS(simt::capture(stream, body), simt::CaptureError);
    // The capture ended: the same work runs eagerly now.
    affine(nullptr, y.data(), x.data(), {1.f, 0.f});
  };
  rejects([&] { simt::synchronize(); }, "device synchronise");
  rejects([&] { stream.synchronize(); }, "stream synchronise");
  rejects(
      [&] {
        simt::Event e;
        e.record(stream);
        e.synchronize();
      },
      "event synchronise");
  rejects([&] { simt::DeviceBuffer<float> b(4); }, "cudaMalloc");
  rejects([&] { pinned = simt::PinnedBuffer<float>(8); }, "cudaMallocHost / cudaFreeHost");
  rejects([&] { y.download(pageable, stream); }, "copy back (it waits)");
  rejects([&] { simt::copy_to_device(x.data(), pageable.data(), kN, stream.handle()); },
          "a captured copy from pageable memory");
  rejects([&] { simt::copy_to_device(x.data(), pinned.data(), kN); },
          "a copy on the default stream");
  rejects(
      [&] {
        affine(nullptr, y.data(), x.data(), {1.f, 0.f});
      },
      "a launch on the default stream");
  rejects([&] { affine(other, y.data(), x.data(), {1.f, 0.f}); }, "a launch on another stream");
  rejects([&] { (void)simt::capture(stream, [] {}); }, "a nested capture");
  REQUIRE_THROWS_WITH(simt::capture(nullptr, [] {}), Catch::Contains("default stream"));
  // The error names what was refused.
  REQUIRE_THROWS_WITH(simt::capture(stream, [&] { stream.synchronize(); }),
                      Catch::Contains("cudaStreamSynchronize") && Catch::Contains("captured"));
  REQUIRE_THROWS_WITH(simt::capture(stream,
                                    [&] {
                                      affine(other, y.data(), x.data(), {1.f, 0.f});
                                    }),
                      Catch::Contains("affine") && Catch::Contains("another stream"));
  // An exception of the captured code propagates and ends the capture too.
  REQUIRE_THROWS_WITH(simt::capture(stream, [] { throw std::runtime_error("boom"); }), "boom");
  simt::DeviceBuffer<float> after(4);  // not capturing: allocations work again
  REQUIRE(after.size() == 4);
}

TEST_CASE("the current stream is scoped per thread", "[simt][graph]") {
  simt::Stream a, b;
  REQUIRE(simt::current_stream() == nullptr);
  {
    simt::StreamScope sa(a);
    REQUIRE(simt::current_stream() == a.handle());
    {
      simt::StreamScope sb(b);
      REQUIRE(simt::current_stream() == b.handle());
    }
    REQUIRE(simt::current_stream() == a.handle());
  }
  REQUIRE(simt::current_stream() == nullptr);
  REQUIRE(a.handle() != nullptr);
  REQUIRE(a.handle() != b.handle());
}

TEST_CASE("a dry run checks, counts and logs launches without running them", "[simt][graph]") {
  simt::DeviceBuffer<float> x(kN), y(kN);
  x.fill_bytes(0), y.fill_bytes(0);
  std::vector<float> out(kN);
  simt::LaunchLog log;
  const simt::Counts before = simt::counts();
  {
    const simt::DryRun dry;
    REQUIRE(simt::DryRun::active());
    simt::expect_bytes(2 * kN * sizeof(float));  // the launcher's model of what it moves
    affine(nullptr, y.data(), x.data(), {1.f, 5.f});
    // The launch is still checked as it would be on a GPU.
    REQUIRE_THROWS_AS(simt::launch(simt::kernel<simt_test::affine>, dim3(1), dim3(2048), 0, nullptr,
                                   y.data(), x.data(), simt_test::Affine{}, kN),
                      simt::LaunchError);
    y.download(out);  // copies run
  }
  REQUIRE_FALSE(simt::DryRun::active());
  for (float v : out) REQUIRE(v == 0.f);  // the kernel did not run
  const auto launched = log.take();
  REQUIRE(launched.size() == 1);
  CHECK(launched[0].kernel.find("affine") != std::string::npos);
  CHECK(launched[0].blocks() == (kN + 127) / 128);
  CHECK(launched[0].bytes == 2 * kN * sizeof(float));
  CHECK((simt::counts() - before).launches == 1);
  affine(nullptr, y.data(), x.data(), {1.f, 5.f});  // and runs again outside the dry run
  y.download(out);
  for (float v : out) REQUIRE(v == 5.f);
  CHECK(log.take().at(0).bytes == 0);  // a model is for one launch only
}

// A step's masks go up in one slot per sequence whatever part of them a step fills
// (model/gpt2.hpp): put_padded stages the array, then zeros to the size asked, so a graph's copy
// of a fixed size uploads what this step put and zeros, never a previous step's values.
TEST_CASE("a padded staging array uploads its values, then zeros, at one size", "[simt][graph]") {
  simt::Stream stream;
  simt::StagingBuffer staging;
  const std::vector<uint32_t> many = {9, 9, 9, 9, 9, 9}, few = {1, 2, 3};
  staging.put(std::span<const uint32_t>(many));  // the previous step's values, in host memory
  staging.clear();
  const std::size_t at = staging.put_padded(std::span<const uint32_t>(few), 8);
  CHECK(at == 0);
  CHECK(staging.bytes() == 8 * sizeof(uint32_t));
  staging.reserve_device();
  staging.upload(stream.handle());
  std::vector<uint32_t> got(8);
  simt::copy_to_host(got.data(), staging.device<uint32_t>(at), got.size(), stream.handle());
  stream.synchronize();
  CHECK(got == std::vector<uint32_t>{1, 2, 3, 0, 0, 0, 0, 0});
  // Asked for fewer than it holds: the whole array, no padding.
  staging.clear();
  staging.put_padded(std::span<const uint32_t>(many), 4);
  CHECK(staging.bytes() == many.size() * sizeof(uint32_t));
}
