// SPDX-License-Identifier: Apache-2.0
// Block-level behaviour of the emulator: barriers, shared memory, blocks on several OS threads,
// and a tiled SGEMM against a plain loop.
#include <catch2/catch.hpp>

#include <random>
#include <span>
#include <vector>

#include "test_simt_block_kernels.hpp"

namespace simt = servekit::simt;
using namespace simt_test;

TEST_CASE("block reduction through shuffles is exact on ints", "[simt]") {
  for (int threads : {32, 96, 1024}) {
    for (int n : {1, 31, 1000, 70001}) {
      std::vector<int> x(static_cast<std::size_t>(n));
      std::mt19937 rng(n + threads);
      std::uniform_int_distribution<int> dist(-100000, 100000);
      for (int& v : x) v = dist(rng);
      const int blocks = (n + threads - 1) / threads;
      simt::DeviceBuffer<int> dx{std::span<const int>(x)}, dout(static_cast<std::size_t>(blocks));
      simt::launch(simt::kernel<block_sum>, dim3(blocks), dim3(threads), 0, nullptr, dx.data(),
                   dout.data(), n);
      std::vector<int> out(static_cast<std::size_t>(blocks));
      dout.download(out);
      for (int b = 0; b < blocks; ++b) {
        long long ref = 0;
        for (int i = b * threads; i < std::min(n, (b + 1) * threads); ++i)
          ref += x[static_cast<std::size_t>(i)];
        INFO("threads " << threads << " n " << n << " block " << b);
        REQUIRE(out[static_cast<std::size_t>(b)] == ref);
      }
    }
  }
}

TEST_CASE("__syncthreads orders every round across 1024 threads", "[simt]") {
  for (int n : {1, 33, 1000, 1024}) {
    const int rounds = 7;
    std::vector<int> x(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = 3 * i + 1;
    // Reference: the same rounds, sequentially.
    std::vector<int> ref = x, next(ref.size());
    for (int r = 0; r < rounds; ++r) {
      for (int t = 0; t < n; ++t)
        next[static_cast<std::size_t>(t)] = ref[static_cast<std::size_t>((t + 1) % n)] + r;
      ref = next;
    }
    simt::DeviceBuffer<int> dx{std::span<const int>(x)};
    simt::launch(simt::kernel<rotate_rounds>, dim3(1), dim3(n), 0, nullptr, dx.data(), rounds);
    dx.download(x);
    INFO("threads " << n);
    REQUIRE(x == ref);
  }
}

TEST_CASE("static and dynamic shared memory are per block", "[simt]") {
  for (int threads : {1, 37, 256}) {
    const int n = 1001;
    std::vector<int> x(n);
    for (int i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = i * i % 9973;
    const int blocks = (n + threads - 1) / threads;
    simt::DeviceBuffer<int> dx{std::span<const int>(x)}, dout(n);
    simt::launch(simt::kernel<reverse_smem>, dim3(blocks), dim3(threads), threads * sizeof(int),
                 nullptr, dx.data(), dout.data(), n);
    std::vector<int> out(n);
    dout.download(out);
    for (int i = 0; i < n; ++i) {
      const int base = i / threads * threads, j = base + threads - 1 - (i - base);
      const int expect = j < n ? 3 * x[static_cast<std::size_t>(j)] : 0;
      INFO("threads " << threads << " i " << i);
      REQUIRE(out[static_cast<std::size_t>(i)] == expect);
    }
  }
}

#if !defined(__CUDACC__)
TEST_CASE("blocks run concurrently on 2 OS threads", "[simt][emulator]") {
  simt::set_host_workers(2);
  simt::DeviceBuffer<int> flags(2), out(1);
  flags.fill_bytes(0);
  out.fill_bytes(0);
  simt::launch(simt::kernel<handshake>, dim3(2), dim3(64), 0, nullptr, flags.data(), out.data());
  int seen = 0;
  out.download(std::span<int>(&seen, 1));
  simt::set_host_workers(0);
  REQUIRE(seen == 1);
}
#endif

TEST_CASE("tiled SGEMM matches a plain loop", "[simt]") {
  struct Shape {
    int m, n, k;
  };
  for (Shape s : {Shape{1, 1, 1}, Shape{67, 45, 33}, Shape{128, 96, 80}}) {
    std::mt19937 rng(s.m * 131 + s.n);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> a(static_cast<std::size_t>(s.m * s.k)),
        b(static_cast<std::size_t>(s.k * s.n));
    for (float& v : a) v = dist(rng);
    for (float& v : b) v = dist(rng);
    simt::DeviceBuffer<float> da{std::span<const float>(a)}, db{std::span<const float>(b)};
    simt::DeviceBuffer<float> dc(static_cast<std::size_t>(s.m * s.n));
    dc.fill_bytes(0xff);  // NaN: an unwritten element fails
    const dim3 grid((s.n + kTile - 1) / kTile, (s.m + kTile - 1) / kTile);
    simt::launch(simt::kernel<sgemm_tiled>, grid, dim3(kTile, kTile), 0, nullptr, da.data(),
                 db.data(), dc.data(), s.m, s.n, s.k);
    std::vector<float> c(static_cast<std::size_t>(s.m * s.n));
    dc.download(c);
    for (int i = 0; i < s.m; ++i)
      for (int j = 0; j < s.n; ++j) {
        double ref = 0, mag = 0;
        for (int p = 0; p < s.k; ++p) {
          ref += double(a[static_cast<std::size_t>(i * s.k + p)]) *
                 b[static_cast<std::size_t>(p * s.n + j)];
          mag += std::abs(double(a[static_cast<std::size_t>(i * s.k + p)]) *
                          b[static_cast<std::size_t>(p * s.n + j)]);
        }
        INFO(s.m << 'x' << s.n << 'x' << s.k << " at " << i << ',' << j);
        REQUIRE(std::abs(c[static_cast<std::size_t>(i * s.n + j)] - ref) <=
                1e-6 + mag * s.k * 6e-8);
      }
  }
}
