// SPDX-License-Identifier: Apache-2.0
// Tensor-core fragments under emulation: the m16n8k16 and int8 m16n8k32 layouts checked against
// a second source (CuTe's MMA_Traits<SM80_16x8x16_F32F16F16F32_TN> and
// <SM80_16x8x32_S32S8S8S32_TN>), mma against a plain loop, ldmatrix against
// the PTX ISA's description, and a multi-tile GEMM that takes its fragments from ldmatrix.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "test_simt_mma_kernels.hpp"

namespace simt = servekit::simt;
using namespace simt_test;

namespace {

// A CuTe layout mode: coordinate c -> sum_i ((c / prod(shape[<i])) % shape[i]) * stride[i]
// (colexicographic, CuTe's convention).
struct Mode {
  std::vector<int> shape, stride;
  int operator()(int c) const {
    int idx = 0;
    for (std::size_t i = 0; i < shape.size(); ++i) {
      idx += (c % shape[i]) * stride[i];
      c /= shape[i];
    }
    return idx;
  }
};

// cute/atom/mma_traits_sm80.hpp, MMA_Traits<SM80_16x8x16_F16F16F16F16_TN> (which the
// F32F16F16F32 and F32BF16BF16F32 traits inherit): (thread, value) -> column-major index into
// A (M16, K16), B (N8, K16), C (M16, N8).
const Mode kThr = {{4, 8}, {32, 1}};   // ALayout / CLayout thread mode
const Mode kThrB = {{4, 8}, {16, 1}};  // BLayout thread mode
const Mode kValA = {{2, 2, 2}, {16, 8, 128}};
const Mode kValB = {{2, 2}, {8, 64}};
const Mode kValC = {{2, 2}, {16, 8}};  // SM80_16x8_Row

// MMA_Traits<SM80_16x8x32_S32S8S8S32_TN>: A (M16, K32), B (N8, K32), C as above.
const Mode kThrA8 = {{4, 8}, {64, 1}};
const Mode kValA8 = {{4, 2, 2}, {16, 8, 256}};
const Mode kThrB8 = {{4, 8}, {32, 1}};
const Mode kValB8 = {{4, 2}, {8, 128}};

float half_bits_to_float(std::uint16_t h) {
  __half_raw r;
  r.x = h;
  return __half2float(__half(r));
}
float bf16_bits_to_float(std::uint16_t h) {
  __nv_bfloat16_raw r;
  r.x = h;
  return __bfloat162float(__nv_bfloat16(r));
}
std::uint16_t float_to_half_bits(float f) {
  return __half_raw(__float2half(f)).x;
}
std::uint16_t float_to_bf16_bits(float f) {
  return __nv_bfloat16_raw(__float2bfloat16(f)).x;
}

}  // namespace

TEST_CASE("m16n8k16 fragment layouts equal CuTe's SM80_16x8x16 traits", "[simt][mma]") {
  namespace L = simt::mma_layout;
  std::vector<int> seen_a(256, 0), seen_b(128, 0), seen_c(128, 0);
  for (int lane = 0; lane < 32; ++lane) {
    for (int v = 0; v < 8; ++v) {
      const int idx = kThr(lane) + kValA(v);  // (M16, K16) column-major
      INFO("A lane " << lane << " value " << v);
      REQUIRE(L::a_row(lane, v) == idx % 16);
      REQUIRE(L::a_col(lane, v) == idx / 16);
      ++seen_a[static_cast<std::size_t>(idx)];
    }
    for (int v = 0; v < 4; ++v) {
      const int idx = kThrB(lane) + kValB(v);  // (N8, K16) column-major
      INFO("B lane " << lane << " value " << v);
      REQUIRE(L::b_col(lane, v) == idx % 8);  // n
      REQUIRE(L::b_row(lane, v) == idx / 8);  // k
      ++seen_b[static_cast<std::size_t>(idx)];
      const int cidx = kThr(lane) + kValC(v);  // (M16, N8) column-major
      INFO("C lane " << lane << " value " << v);
      REQUIRE(L::c_row(lane, v) == cidx % 16);
      REQUIRE(L::c_col(lane, v) == cidx / 16);
      ++seen_c[static_cast<std::size_t>(cidx)];
    }
  }
  // Each tile element is held by exactly one (lane, value).
  for (int s : seen_a) REQUIRE(s == 1);
  for (int s : seen_b) REQUIRE(s == 1);
  for (int s : seen_c) REQUIRE(s == 1);
}

TEST_CASE("int8 m16n8k32 fragment layouts equal CuTe's SM80_16x8x32 traits", "[simt][mma]") {
  namespace L = simt::mma_layout;
  std::vector<int> seen_a(512, 0), seen_b(256, 0);
  for (int lane = 0; lane < 32; ++lane) {
    for (int v = 0; v < 16; ++v) {
      const int idx = kThrA8(lane) + kValA8(v);  // (M16, K32) column-major
      INFO("A lane " << lane << " value " << v);
      REQUIRE(L::a8_row(lane, v) == idx % 16);
      REQUIRE(L::a8_col(lane, v) == idx / 16);
      ++seen_a[static_cast<std::size_t>(idx)];
    }
    for (int v = 0; v < 8; ++v) {
      const int idx = kThrB8(lane) + kValB8(v);  // (N8, K32) column-major
      INFO("B lane " << lane << " value " << v);
      REQUIRE(L::b8_col(lane, v) == idx % 8);
      REQUIRE(L::b8_row(lane, v) == idx / 8);
      ++seen_b[static_cast<std::size_t>(idx)];
    }
  }
  for (int s : seen_a) REQUIRE(s == 1);
  for (int s : seen_b) REQUIRE(s == 1);
}

// Exact: every sum of int8 products fits in int32. Codes span -128..127 (the instruction's
// whole range, though W8A8 writes no -128).
TEST_CASE("mma m16n8k32 int8 equals a plain loop on random tiles", "[simt][mma]") {
  for (unsigned seed = 1; seed <= 5; ++seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> code(-128, 127), big(-1 << 20, 1 << 20);
    std::vector<std::int8_t> a(512), b(256);
    std::vector<std::int32_t> c(128);
    for (auto& v : a) v = static_cast<std::int8_t>(code(rng));
    for (auto& v : b) v = static_cast<std::int8_t>(code(rng));
    for (auto& v : c) v = big(rng);
    simt::DeviceBuffer<std::int8_t> da{std::span<const std::int8_t>(a)},
        db{std::span<const std::int8_t>(b)};
    simt::DeviceBuffer<std::int32_t> dc{std::span<const std::int32_t>(c)}, dd(128);
    dd.fill_bytes(0xff);
    simt::launch(simt::kernel<mma_tile_s8>, dim3(1), dim3(32), 0, nullptr, da.data(), db.data(),
                 dc.data(), dd.data());
    std::vector<std::int32_t> d(128);
    dd.download(d);
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 8; ++n) {
        std::int32_t ref = c[static_cast<std::size_t>(m * 8 + n)];
        for (int k = 0; k < 32; ++k)
          ref += a[static_cast<std::size_t>(m * 32 + k)] * b[static_cast<std::size_t>(k * 8 + n)];
        INFO("seed " << seed << " at " << m << ',' << n);
        REQUIRE(d[static_cast<std::size_t>(m * 8 + n)] == ref);
      }
  }
}

template <bool kBf16>
void check_mma_tile(unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  auto to_bits = kBf16 ? float_to_bf16_bits : float_to_half_bits;
  auto to_float = kBf16 ? bf16_bits_to_float : half_bits_to_float;
  std::vector<std::uint16_t> a(256), b(128);
  std::vector<float> c(128);
  for (auto& v : a) v = to_bits(dist(rng));
  for (auto& v : b) v = to_bits(dist(rng));
  for (auto& v : c) v = dist(rng);
  simt::DeviceBuffer<std::uint16_t> da{std::span<const std::uint16_t>(a)},
      db{std::span<const std::uint16_t>(b)};
  simt::DeviceBuffer<float> dc{std::span<const float>(c)}, dd(128);
  dd.fill_bytes(0xff);
  simt::launch(simt::kernel<mma_tile<kBf16>>, dim3(1), dim3(32), 0, nullptr, da.data(), db.data(),
               dc.data(), dd.data());
  std::vector<float> d(128);
  dd.download(d);
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      double ref = c[static_cast<std::size_t>(m * 8 + n)], mag = std::abs(ref);
      for (int k = 0; k < 16; ++k) {
        const double p = double(to_float(a[static_cast<std::size_t>(m * 16 + k)])) *
                         to_float(b[static_cast<std::size_t>(k * 8 + n)]);
        ref += p;
        mag += std::abs(p);
      }
      INFO((kBf16 ? "bf16" : "f16") << " seed " << seed << " at " << m << ',' << n);
      REQUIRE(std::abs(d[static_cast<std::size_t>(m * 8 + n)] - ref) <= mag * 17 * 6e-8);
    }
}

TEST_CASE("mma m16n8k16 f16 and bf16 match a plain loop on random tiles", "[simt][mma]") {
  for (unsigned seed = 1; seed <= 5; ++seed) {
    check_mma_tile<false>(seed);
    check_mma_tile<true>(seed);
  }
}

TEST_CASE("ldmatrix x4, x2 and their transposes deliver the PTX ISA's fragments", "[simt][mma]") {
  std::vector<std::uint16_t> tile(256);
  for (int i = 0; i < 256; ++i)
    tile[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>(i * 3 + 1);
  simt::DeviceBuffer<std::uint16_t> dt{std::span<const std::uint16_t>(tile)};
  simt::DeviceBuffer<std::uint32_t> dout(32 * 12);
  simt::launch(simt::kernel<ldmatrix_all>, dim3(1), dim3(32), 0, nullptr, dt.data(), dout.data());
  std::vector<std::uint32_t> out(32 * 12);
  dout.download(out);
  // Matrix j is the 8x8 block at rows (j & 1) * 8, cols (j >> 1) * 8 of the tile.
  auto at = [&](int j, int r, int c) -> std::uint32_t {
    return tile[static_cast<std::size_t>(((j & 1) * 8 + r) * 16 + (j >> 1) * 8 + c)];
  };
  for (int l = 0; l < 32; ++l) {
    const std::uint32_t* o = &out[static_cast<std::size_t>(12 * l)];
    const int g = l / 4, t = l % 4;
    INFO("lane " << l);
    for (int j = 0; j < 4; ++j) {
      // Without .trans lane l holds row l/4, columns 2(l%4) and 2(l%4)+1 of each matrix.
      REQUIRE(o[j] == (at(j, g, 2 * t) | at(j, g, 2 * t + 1) << 16));
      // With .trans, the same positions of the transposed matrix.
      REQUIRE(o[6 + j] == (at(j, 2 * t, g) | at(j, 2 * t + 1, g) << 16));
    }
    for (int j = 0; j < 2; ++j) {
      REQUIRE(o[4 + j] == (at(j, g, 2 * t) | at(j, g, 2 * t + 1) << 16));
      REQUIRE(o[10 + j] == (at(j, 2 * t, g) | at(j, 2 * t + 1, g) << 16));
    }
  }
}

TEST_CASE("tensor-core GEMM fed by ldmatrix matches a plain loop", "[simt][mma]") {
  struct Shape {
    int m, n, k;
  };
  for (Shape s : {Shape{16, 8, 16}, Shape{48, 40, 64}, Shape{80, 24, 32}}) {
    std::mt19937 rng(s.m + 7 * s.n + 31 * s.k);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<__half> a(static_cast<std::size_t>(s.m * s.k)),
        b(static_cast<std::size_t>(s.k * s.n));
    for (auto& v : a) v = __float2half(dist(rng));
    for (auto& v : b) v = __float2half(dist(rng));
    simt::DeviceBuffer<__half> da{std::span<const __half>(a)}, db{std::span<const __half>(b)};
    simt::DeviceBuffer<float> dc(static_cast<std::size_t>(s.m * s.n));
    dc.fill_bytes(0xff);
    const int tiles = s.m / 16 * (s.n / 8);
    simt::launch(simt::kernel<hgemm_mma>, dim3((tiles + 3) / 4), dim3(128), 0, nullptr, da.data(),
                 db.data(), dc.data(), s.m, s.n, s.k);
    std::vector<float> c(static_cast<std::size_t>(s.m * s.n));
    dc.download(c);
    for (int i = 0; i < s.m; ++i)
      for (int j = 0; j < s.n; ++j) {
        double ref = 0, mag = 0;
        for (int p = 0; p < s.k; ++p) {
          const double prod = double(__half2float(a[static_cast<std::size_t>(i * s.k + p)])) *
                              __half2float(b[static_cast<std::size_t>(p * s.n + j)]);
          ref += prod;
          mag += std::abs(prod);
        }
        INFO(s.m << 'x' << s.n << 'x' << s.k << " at " << i << ',' << j);
        REQUIRE(std::abs(c[static_cast<std::size_t>(i * s.n + j)] - ref) <= mag * (s.k + 1) * 6e-8);
      }
  }
}
