// SPDX-License-Identifier: Apache-2.0
// Warp-level ops and atomics of the emulator against the semantics the CUDA programming guide
// states in words (re-derived here independently of the emulator's PTX-rule code).
#include <catch2/catch.hpp>

#include <span>
#include <vector>

#include "test_simt_warp_kernels.hpp"

namespace simt = servekit::simt;
using namespace simt_test;

namespace {
// The guide: width-lane segments; __shfl_sync reads lane srcLane % width of the caller's
// segment; up/down return the caller's own value when the source leaves the segment; xor may
// read earlier segments but returns the own value for a later one.
int expect_idx(int lane, int src, int width) {
  return lane / width * width + src % width;
}
int expect_up(int lane, int delta, int width) {
  return lane % width >= delta ? lane - delta : lane;
}
int expect_down(int lane, int delta, int width) {
  return lane % width + delta < width ? lane + delta : lane;
}
int expect_xor(int lane, int mask, int width) {
  const int src = lane ^ mask;
  return src >= (lane / width + 1) * width ? lane : src;
}
}  // namespace

TEST_CASE("shuffles: idx, up, down, xor at every width", "[simt]") {
  for (int threads : {32, 96}) {
    for (int width : {1, 2, 4, 8, 16, 32}) {
      for (int param : {0, 1, 3, 5, 13, 31}) {
        simt::DeviceBuffer<int> dout(static_cast<std::size_t>(4 * threads));
        simt::launch(simt::kernel<shuffles>, dim3(1), dim3(threads), 0, nullptr, dout.data(), param,
                     static_cast<unsigned>(param), param, width);
        std::vector<int> out(static_cast<std::size_t>(4 * threads));
        dout.download(out);
        for (int t = 0; t < threads; ++t) {
          const int lane = t % 32, base = t - lane;
          auto value = [&](int src_lane) { return 1000 * (base + src_lane) + 7; };
          INFO("threads " << threads << " width " << width << " param " << param << " t " << t);
          CHECK(out[static_cast<std::size_t>(4 * t + 0)] == value(expect_idx(lane, param, width)));
          CHECK(out[static_cast<std::size_t>(4 * t + 1)] == value(expect_up(lane, param, width)));
          CHECK(out[static_cast<std::size_t>(4 * t + 2)] == value(expect_down(lane, param, width)));
          CHECK(out[static_cast<std::size_t>(4 * t + 3)] == value(expect_xor(lane, param, width)));
        }
      }
    }
  }
}

TEST_CASE("a shuffle reads the low five bits of its lane or offset, as PTX's b[4:0]", "[simt]") {
  // __shfl_down_sync(mask, v, 33) moves by 1 on a GPU, not "out of range: own value".
  const int threads = 64;
  for (int width : {8, 32}) {
    for (int param : {32, 33, 45, 63, 97}) {
      simt::DeviceBuffer<int> dout(static_cast<std::size_t>(4 * threads));
      simt::launch(simt::kernel<shuffles>, dim3(1), dim3(threads), 0, nullptr, dout.data(), param,
                   static_cast<unsigned>(param), param, width);
      std::vector<int> out(static_cast<std::size_t>(4 * threads));
      dout.download(out);
      const int low = param & 31;
      for (int t = 0; t < threads; ++t) {
        const int lane = t % 32, base = t - lane;
        auto value = [&](int src_lane) { return 1000 * (base + src_lane) + 7; };
        INFO("width " << width << " param " << param << " t " << t);
        CHECK(out[static_cast<std::size_t>(4 * t + 0)] == value(expect_idx(lane, low, width)));
        CHECK(out[static_cast<std::size_t>(4 * t + 1)] == value(expect_up(lane, low, width)));
        CHECK(out[static_cast<std::size_t>(4 * t + 2)] == value(expect_down(lane, low, width)));
        CHECK(out[static_cast<std::size_t>(4 * t + 3)] == value(expect_xor(lane, low, width)));
      }
    }
  }
}

TEST_CASE("shuffles move floats and doubles, and work on a half-warp mask", "[simt]") {
  const int threads = 64;
  simt::DeviceBuffer<float> dout(3 * threads);
  simt::launch(simt::kernel<shuffle_types>, dim3(1), dim3(threads), 0, nullptr, dout.data());
  std::vector<float> out(3 * threads);
  dout.download(out);
  for (int t = 0; t < threads; ++t) {
    const int lane = t % 32, base = t - lane;
    INFO("t " << t);
    REQUIRE(out[static_cast<std::size_t>(3 * t)] == 0.5f * (base + expect_down(lane, 3, 32)));
    REQUIRE(out[static_cast<std::size_t>(3 * t + 1)] ==
            static_cast<float>(0.25 * (base + 31 - lane)));
    REQUIRE(out[static_cast<std::size_t>(3 * t + 2)] == (lane < 16 ? 0.5f * (t ^ 1) : -1.0f));
  }
}

TEST_CASE("ballot, any and all", "[simt]") {
  const int threads = 96;
  for (int pattern = 0; pattern < 4; ++pattern) {
    std::vector<int> pred(threads);
    for (int t = 0; t < threads; ++t)
      pred[static_cast<std::size_t>(t)] = pattern == 0   ? 0
                                          : pattern == 1 ? 1
                                          : pattern == 2 ? (t * 7 % 5 == 0)
                                                         : (t / 32 != 1);  // warp 1 all false
    simt::DeviceBuffer<int> dpred{std::span<const int>(pred)};
    simt::DeviceBuffer<unsigned> dout(3 * threads);
    simt::launch(simt::kernel<votes>, dim3(1), dim3(threads), 0, nullptr, dpred.data(),
                 dout.data());
    std::vector<unsigned> out(3 * threads);
    dout.download(out);
    for (int t = 0; t < threads; ++t) {
      const int base = t / 32 * 32;
      unsigned ballot = 0;
      for (int l = 0; l < 32; ++l)
        ballot |= pred[static_cast<std::size_t>(base + l)] ? 1u << l : 0u;
      INFO("pattern " << pattern << " t " << t);
      REQUIRE(out[static_cast<std::size_t>(3 * t)] == ballot);
      REQUIRE(out[static_cast<std::size_t>(3 * t + 1)] == (ballot != 0 ? 1u : 0u));
      REQUIRE(out[static_cast<std::size_t>(3 * t + 2)] == (ballot == 0xffffffffu ? 1u : 0u));
    }
  }
}

TEST_CASE("atomics from many blocks on several OS threads", "[simt]") {
#if !defined(__CUDACC__)
  simt::set_host_workers(2);  // the emulator's blocks on 2 OS threads, so the atomics race
#endif
  const int n = 50021, threads = 128;
  simt::DeviceBuffer<int> isum(1), cas_sum(1), exch(1);
  simt::DeviceBuffer<unsigned> umax(1);
  simt::DeviceBuffer<float> fsum(1), fmax(1);
  for (auto* b : {&isum, &cas_sum, &exch}) b->fill_bytes(0);
  umax.fill_bytes(0);
  fsum.fill_bytes(0);
  const float lowest = -1.0f;
  simt::copy_to_device(fmax.data(), &lowest, 1);
  simt::launch(simt::kernel<atomics>, dim3((n + threads - 1) / threads), dim3(threads), 0, nullptr,
               isum.data(), umax.data(), fsum.data(), cas_sum.data(), exch.data(), fmax.data(), n);
#if !defined(__CUDACC__)
  simt::set_host_workers(0);
#endif
  long long ref_sum = 0;
  unsigned ref_max = 0;
  float ref_fmax = -1.0f;
  for (int i = 0; i < n; ++i) {
    ref_sum += i % 7;
    ref_max = std::max(ref_max, static_cast<unsigned>((i * 37) % 1001));
    ref_fmax = std::max(ref_fmax, 0.001f * static_cast<float>((i * 53) % 997));
  }
  int i_sum, c_sum, last;
  unsigned u_max;
  float f_sum, f_max;
  simt::copy_to_host(&i_sum, isum.data(), 1);
  simt::copy_to_host(&c_sum, cas_sum.data(), 1);
  simt::copy_to_host(&last, exch.data(), 1);
  simt::copy_to_host(&u_max, umax.data(), 1);
  simt::copy_to_host(&f_sum, fsum.data(), 1);
  simt::copy_to_host(&f_max, fmax.data(), 1);
  REQUIRE(i_sum == ref_sum);
  REQUIRE(c_sum == 2 * n);
  REQUIRE(u_max == ref_max);
  REQUIRE(f_sum == static_cast<float>(n));  // sums of 1.0f are exact below 2^24
  REQUIRE(f_max == ref_fmax);
  REQUIRE(last >= 0);
  REQUIRE(last < n);
}
