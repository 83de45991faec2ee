// SPDX-License-Identifier: Apache-2.0
// Weight formats: names, the course's zero-point formula, round-trip error bounds, the fused
// linear kernels against a dequantised reference, W8A8 against its quantisation bound, and
// bad-input errors.
#include <catch2/catch.hpp>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "servekit/kernels/host/linear.hpp"
#include "servekit/kernels/ref/linear.hpp"
#include "servekit/model/config.hpp"
#include "servekit/weights/formats.hpp"
#include "support/host_form.hpp"

namespace sk = servekit;
namespace w = servekit::weights;
using sk::kernels::ref::Epilogue;

namespace {
std::vector<float> randn(std::size_t n, uint64_t seed, float sd = 1.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A (K, N) matrix whose columns have very different ranges, plus a few outliers: the case
// that separates per-tensor from per-channel and per-group quantization.
std::vector<float> awkward_matrix(int K, int N, uint64_t seed) {
  auto v = randn(static_cast<std::size_t>(K) * N, seed);
  for (int k = 0; k < K; k++)
    for (int n = 0; n < N; n++) v[static_cast<std::size_t>(k) * N + n] *= 0.02f * (1 + n % 7);
  if (K * N > 3) v[static_cast<std::size_t>(K * N) / 3] = 3.5f;
  return v;
}

constexpr float kU = 1.f / (1 << 24);  // fp32 unit roundoff
}  // namespace

TEST_CASE("format names are printable and reach Config::name()") {
  STATIC_REQUIRE(w::F16::name == "f16");
  STATIC_REQUIRE(w::BF16::name == "bf16");
  STATIC_REQUIRE(w::U8ZeroPoint<w::PerTensor>::name == "u8zp-tensor");
  STATIC_REQUIRE(w::U8ZeroPoint<w::PerChannel>::name == "u8zp-channel");
  STATIC_REQUIRE(w::U8ZeroPoint<w::Group<64>>::name == "u8zp-group64");
  STATIC_REQUIRE(w::U8ZeroPoint<w::Group<7>>::name == "u8zp-group7");
  STATIC_REQUIRE(w::U8ZeroPoint<w::Group<128>>::name == "u8zp-group128");
  STATIC_REQUIRE(w::WeightFormat<w::U8ZeroPoint<w::Group<32>>>);
  CHECK(sk::Config<sk::dims::TinyA, w::U8ZeroPoint<w::Group<32>>>::name() ==
        "tiny-a/u8zp-group32/contiguous/none/host");
  STATIC_REQUIRE(w::W8A8<w::PerChannel>::name == "w8a8-channel");
  STATIC_REQUIRE(w::W8A8<w::Group<128>>::name == "w8a8-group128");
}

TEMPLATE_TEST_CASE("w8a8: symmetric codes in -127..127, |w - w'| <= s / 2, column sums", "",
                   w::W8A8<w::PerTensor>, w::W8A8<w::PerChannel>, w::W8A8<w::Group<8>>) {
  for (auto [K, N] : {std::pair{8, 1}, {64, 33}, {256, 70}}) {
    const auto v = awkward_matrix(K, N, K * 31 + N);
    const auto m = w::Matrix<TestType>::from_f32(v, K, N);
    int bad = 0, at_max = 0;
    for (int k = 0; k < K; k++)
      for (int n = 0; n < N; n++) {
        const std::size_t i = static_cast<std::size_t>(k) * N + n;
        const float s = m.scale[m.state_index(k, n)];
        // The scale is max |w| / 127 of the group, so every code is in range and the group's
        // largest weight takes +-127.
        if (m.q[i] < -127 || m.q[i] > 127) bad++;
        if (std::abs(m.q[i]) == 127) at_max++;
        if (!(std::abs(v[i] - m.dequant(k, n)) <= 0.5f * s * (1 + 4 * kU) + 1e-30f)) bad++;
      }
    CHECK(bad == 0);
    CHECK(at_max >= static_cast<int>(m.scale.size()));
    // The host's packed form adds the groups' column sums of the codes (host/packed.hpp) on
    // builds whose activation codes carry a bias (VNNI), and nothing on the others.
    const auto packed = sk::kernels::host::Packed<w::Matrix<TestType>>::pack(w::Matrix(m));
    if constexpr (sk::kernels::host::kActBias == 0) CHECK(packed.colsum().empty());
    for (int g = 0; g < K / m.group_rows && sk::kernels::host::kActBias != 0; g++)
      for (int n = 0; n < N; n++) {
        int32_t sum = 0;
        for (int k = g * m.group_rows; k < (g + 1) * m.group_rows; k++)
          sum += m.q[static_cast<std::size_t>(k) * N + n];
        REQUIRE(packed.colsum()[static_cast<std::size_t>(g) * N + n] == sum);
      }
  }
  // An all-zero group: scale 0, codes 0, exact.
  const auto z = w::Matrix<TestType>::from_f32(std::vector<float>(16 * 3, 0.f), 16, 3);
  for (float s : z.scale) CHECK(s == 0.f);
  for (int k = 0; k < 16; k++)
    for (int n = 0; n < 3; n++) CHECK(z.dequant(k, n) == 0.f);
}

// W8A8 changes both operands: the result is within the bound their rounding gives of the fp32
// product, |x w - x' w'| <= |x| |w - w'| + |w'| |x - x'| with |w - w'| <= s_w / 2 and
// |x - x'| <= s_x / 2, on the host kernels (here for this build's ISA; test_host_matmul checks
// every ISA against the oracle).
TEMPLATE_TEST_CASE("w8a8 linear is within its quantisation steps of the fp32 product", "",
                   w::W8A8<w::PerChannel>, w::W8A8<w::Group<16>>) {
  const int K = 128, N = 45;
  const auto v = awkward_matrix(K, N, 5);
  const auto m = w::Matrix<TestType>::from_f32(v, K, N);
  for (int M : {1, 3, 8, 70}) {
    auto x = randn(static_cast<std::size_t>(M) * K, 70 + M);
    x[0] = 9.f;  // an outlier feature, as GPT-2's activations have
    std::vector<float> out(static_cast<std::size_t>(M) * N);
    sk::kernels::host::linear<Epilogue::Store>(out.data(), x.data(), sk::test::host_form(m),
                                               nullptr, M);
    int bad = 0;
    double worst = 0;
    for (int r = 0; r < M; r++) {
      float amax = 0;
      for (int k = 0; k < K; k++) amax = std::max(amax, std::abs(x[r * K + k]));
      const double sx = amax / 127.0;
      for (int n = 0; n < N; n++) {
        double exact = 0, bound = 0, mag = 0;
        for (int k = 0; k < K; k++) {
          const double xv = x[r * K + k], wv = v[static_cast<std::size_t>(k) * N + n];
          const double sw = m.scale[m.state_index(k, n)];
          exact += xv * wv;
          bound += std::abs(xv) * sw / 2 + (std::abs(wv) + sw / 2) * sx / 2;
          mag += (std::abs(xv) + sx / 2) * (std::abs(wv) + sw / 2);
        }
        const double err = std::abs(out[r * N + n] - exact);
        worst = std::max(worst, err / bound);
        if (!(err <= bound * (1 + 1e-5) + 4 * K * kU * mag)) bad++;
      }
    }
    INFO("M " << M << ": worst error / bound " << worst);
    CHECK(bad == 0);
    CHECK(worst > 0.01);  // the bound is not vacuous: quantisation does show
  }
}

TEST_CASE("u8 zero-point is the course's formula, truncation included") {
  // The course's example tensor as it prints it (4 decimals). Expected values from numpy
  // float32, which evaluates (t - min) / scale, clamp and astype(uint8) with the same IEEE
  // float32 operations as the course's torch code:
  //   t = np.array([[0.9623,0.1279,0.1236],[0.6088,0.2284,0.0868]], np.float32)
  //   sc = (t.max()-t.min())/np.float32(255)          -> 0x1.c2038ep-9 (0.0034333335)
  //   (t-t.min())/sc -> [[255, 11.970874, 10.718446], [152.03883, 41.24272, 0]]
  //   q -> [[255, 11, 10], [152, 41, 0]]   (11.97 -> 11: a cast truncates, it does not round)
  //   q*sc+min -> [[0.9623, 0.12456667, 0.12113333], [0.60866666, 0.22756666, 0.0868]]
  // The q and the recovered values agree with what the course prints for its random tensor.
  std::vector<float> t{0.9623f, 0.1279f, 0.1236f, 0.6088f, 0.2284f, 0.0868f};
  auto m = w::Matrix<w::U8ZeroPoint<w::PerTensor>>::from_f32(t, 2, 3);
  REQUIRE(m.scale.size() == 1);
  CHECK(m.scale[0] == 0x1.c2038ep-9f);
  CHECK(m.zero[0] == 0.0868f);
  CHECK(m.q == std::vector<uint8_t>{255, 11, 10, 152, 41, 0});
  const float want[6] = {0.9623f, 0.12456667f, 0.12113333f, 0.60866666f, 0.22756666f, 0.0868f};
  for (int i = 0; i < 6; i++) CHECK(m.dequant(i / 3, i % 3) == Approx(want[i]).epsilon(1e-6));
  CHECK(m.bytes() == 6 + 2 * sizeof(float));
  CHECK(m.state_bytes() == 2 * sizeof(float));
}

TEST_CASE("u8 zero-point: a constant group has scale 0 and dequantises exactly") {
  std::vector<float> c(12, -0.25f);
  auto t = w::Matrix<w::U8ZeroPoint<w::PerTensor>>::from_f32(c, 3, 4);
  CHECK(t.scale[0] == 0.f);
  for (int k = 0; k < 3; k++)
    for (int n = 0; n < 4; n++) CHECK(t.dequant(k, n) == -0.25f);
  // One constant column among varying ones: only that column's scale is 0.
  c[1] = 1.f, c[5] = 2.f, c[9] = 3.f;  // column 1 varies
  auto ch = w::Matrix<w::U8ZeroPoint<w::PerChannel>>::from_f32(c, 3, 4);
  CHECK(ch.scale[0] == 0.f);
  CHECK(ch.scale[1] == (3.f - 1.f) / 255.f);
  CHECK(ch.dequant(2, 0) == -0.25f);
  CHECK(ch.dequant(0, 1) == 1.f);  // the column's min, stored exactly
  // The max need not come back exactly: (3 - 1) / ((3 - 1) / 255) is 254.99998 in fp32 and
  // the cast truncates it to 254, as the course's code does.
  CHECK(std::abs(ch.dequant(2, 1) - 3.f) <= ch.scale[1]);
}

TEMPLATE_TEST_CASE("u8 zero-point round trip: |w - w'| <= its group's scale", "",
                   w::U8ZeroPoint<w::PerTensor>, w::U8ZeroPoint<w::PerChannel>,
                   w::U8ZeroPoint<w::Group<4>>, w::U8ZeroPoint<w::Group<64>>) {
  using G = typename TestType::Gran;
  const std::pair<int, int> shapes[] = {{64, 1}, {128, 3}, {192, 130}, {64, 257}, {256, 33}};
  for (auto [K, N] : shapes) {
    INFO("K " << K << " N " << N);
    const auto v = awkward_matrix(K, N, 7 + K * N);
    auto m = w::Matrix<TestType>::from_f32(v, K, N);
    const int GK = G::rows(K);
    CHECK(m.group_rows == GK);
    CHECK(m.scale.size() == static_cast<std::size_t>(K / GK) * (G::per_column ? N : 1));
    CHECK(m.bytes() == static_cast<std::size_t>(K) * N + 2 * m.scale.size() * sizeof(float));
    double worst = 0;
    for (int k = 0; k < K; k++)
      for (int n = 0; n < N; n++) {
        const std::size_t s = m.state_index(k, n);
        const float x = v[static_cast<std::size_t>(k) * N + n], y = m.dequant(k, n);
        // Truncation puts w' in (w - scale, w]; the fp32 evaluation of (w - min) / scale and
        // q * scale + min adds a few roundings of magnitude |w| + |min| + 255 * scale.
        const float slack = 8 * kU * (std::abs(x) + std::abs(m.zero[s]) + 255 * m.scale[s]);
        CHECK(std::abs(x - y) <= m.scale[s] + slack);
        CHECK(y <= x + slack);
        // The group's minimum is stored exactly, as q = 0.
        if (x == m.zero[s]) CHECK(y == x);
        worst = std::max(worst, double(std::abs(x - y)));
      }
    // Finer granularity has a smaller bound: every group's scale is at most the tensor's.
    auto whole = w::Matrix<w::U8ZeroPoint<w::PerTensor>>::from_f32(v, K, N);
    for (float s : m.scale) CHECK(s <= whole.scale[0]);
  }
}

TEMPLATE_TEST_CASE("fp16 and bf16 round trips are the dtype's round-to-nearest-even", "", w::F16,
                   w::BF16) {
  const int K = 37, N = 131;
  auto v = awkward_matrix(K, N, 3);
  v[5] = 1e-6f;  // an fp16 denormal
  auto m = w::Matrix<TestType>::from_f32(v, K, N);
  CHECK(m.bytes() == static_cast<std::size_t>(K) * N * 2);
  // Relative error of a normal value: 2^-11 (fp16: 10 mantissa bits), 2^-8 (bf16: 7).
  const float rel = std::is_same_v<TestType, w::F16> ? 0x1p-11f : 0x1p-8f;
  for (int k = 0; k < K; k++)
    for (int n = 0; n < N; n++) {
      const float x = v[static_cast<std::size_t>(k) * N + n], y = m.dequant(k, n);
      if constexpr (std::is_same_v<TestType, w::F16>)
        CHECK(y == sk::half_to_float(sk::float_to_half(x)));
      else
        CHECK(y == sk::bf16_to_float(sk::float_to_bf16(x)));
      if (std::abs(x) >= 0x1p-14f) CHECK(std::abs(x - y) <= rel * std::abs(x));
    }
}

TEST_CASE("the host kernels' half widening (branch-free, and vector) is exact for all 65536") {
  namespace h = sk::kernels::host;
  std::vector<sk::half_t> all(65536);
  for (uint32_t b = 0; b < 65536; b++) all[b].bits = static_cast<uint16_t>(b);
  std::vector<float> vec(65536);
  h::widen_row(vec.data(), all.data(), 65536);  // F16C's vcvtph2ps where the target has it
  int bad = 0, bad_vec = 0;
  for (uint32_t b = 0; b < 65536; b++) {
    const uint32_t want = std::bit_cast<uint32_t>(sk::half_to_float(all[b]));
    if (want != std::bit_cast<uint32_t>(h::widen_half(all[b]))) bad++;
    // vcvtph2ps quiets a signalling NaN (sets the quiet bit), as every IEEE conversion may; the
    // loaders reject non-finite weights, so only "still a NaN of the same sign" matters there.
    const bool nan = std::isnan(sk::half_to_float(all[b]));
    const uint32_t got = std::bit_cast<uint32_t>(vec[b]);
    if (nan ? !std::isnan(vec[b]) || (got >> 31) != (want >> 31) : want != got) bad_vec++;
  }
  CHECK(bad == 0);
  CHECK(bad_vec == 0);
}

// The host's f16 KV cache rows are narrowed by narrow_row (vcvtps2ph where the target has F16C):
// the same bits as core's float_to_half for every float, NaN payloads included, or a cache
// written on the host would differ from one written by the reference.
TEST_CASE("the host kernels' half narrowing (vector) gives float_to_half's bits") {
  namespace h = sk::kernels::host;
  std::vector<float> xs;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4099)  // every exponent, float denormals
    xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(u)));
  for (uint32_t b = 0; b < 0x7c00; b++) {  // each half's value and the ties either side of it
    const float f = sk::half_to_float(sk::half_t{static_cast<uint16_t>(b)});
    const float up = sk::half_to_float(sk::half_t{static_cast<uint16_t>(b + 1)});
    const float mid = static_cast<float>((double(f) + double(up)) / 2);
    for (float x : {f, mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e30f)})
      xs.insert(xs.end(), {x, -x});
  }
  for (uint32_t bits : {0x7f800000u, 0xff800000u, 0x7f800001u, 0xffc00001u, 0x7fbfffffu,
                        0x477ff000u, 0x477fefffu, 0x7f7fffffu})  // inf, NaNs, the tie into inf
    xs.push_back(std::bit_cast<float>(bits));
  while (xs.size() % 8 != 5) xs.push_back(1.f + xs.size() % 8);  // a tail past the vectors
  std::vector<sk::half_t> got(xs.size());
  h::narrow_row(got.data(), xs.data(), static_cast<int>(xs.size()));
  int bad = 0, first = -1;
  for (std::size_t i = 0; i < xs.size(); i++)
    if (got[i].bits != sk::float_to_half(xs[i]).bits) {
      bad++;
      if (first < 0) first = static_cast<int>(i);
    }
  INFO("first mismatch at float bits 0x" << std::hex
                                         << (first < 0 ? 0u : std::bit_cast<uint32_t>(xs[first])));
  CHECK(bad == 0);
}

TEMPLATE_TEST_CASE("fused linear == dequantised reference, every epilogue, awkward sizes", "",
                   w::F32, w::F16, w::BF16, w::U8ZeroPoint<w::PerTensor>,
                   w::U8ZeroPoint<w::PerChannel>, w::U8ZeroPoint<w::Group<4>>,
                   w::U8ZeroPoint<w::Group<64>>) {
  // (W8A8 also rounds x, so it is not a dequantised-weights product: see the test below.)
  // K a multiple of 64 and of 4 (group formats), N never a multiple of the 128-column block.
  const std::pair<int, int> shapes[] = {{64, 1}, {192, 130}, {128, 257}, {320, 77}};
  const int Ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 33};
  for (auto [K, N] : shapes) {
    const auto mat = w::Matrix<TestType>::from_f32(awkward_matrix(K, N, K + N), K, N);
    // The reference: W dequantised element by element, summed in double.
    std::vector<double> Wd(static_cast<std::size_t>(K) * N), Wmag(Wd.size());
    for (int k = 0; k < K; k++)
      for (int n = 0; n < N; n++) {
        const std::size_t i = static_cast<std::size_t>(k) * N + n;
        Wd[i] = mat.dequant(k, n);
        // The magnitude the kernel's roundings scale with: |w'|, or for zero-point formats
        // |q * scale| + |min| <= |w'| + 2 |min| (the factored sum adds both terms).
        double zp = 0;
        if constexpr (requires { mat.zero; }) zp = std::abs(mat.zero[mat.state_index(k, n)]);
        Wmag[i] = std::abs(Wd[i]) + 2 * zp;
      }
    const auto b = randn(N, 99, 0.5f);
    for (int M : Ms) {
      const auto x = randn(static_cast<std::size_t>(M) * K, 1000 + M);
      const auto init = randn(static_cast<std::size_t>(M) * N, 2000 + M);
      for (Epilogue E : {Epilogue::Store, Epilogue::Gelu, Epilogue::Residual}) {
        INFO("K " << K << " N " << N << " M " << M << " epilogue " << int(E));
        std::vector<float> out = init;
        std::vector<float> out_host = init;
        auto run = [&](auto linear) {
          if (E == Epilogue::Store) linear(std::integral_constant<Epilogue, Epilogue::Store>{});
          if (E == Epilogue::Gelu) linear(std::integral_constant<Epilogue, Epilogue::Gelu>{});
          if (E == Epilogue::Residual)
            linear(std::integral_constant<Epilogue, Epilogue::Residual>{});
        };
        run([&](auto e) {
          sk::kernels::ref::linear<e.value>(out.data(), x.data(), mat, b.data(), M);
          sk::kernels::host::linear<e.value>(out_host.data(), x.data(), sk::test::host_form(mat),
                                             b.data(), M);
        });
        int bad = 0, bad_host = 0;
        for (int m = 0; m < M; m++)
          for (int n = 0; n < N; n++) {
            double acc = b[n], mag = std::abs(b[n]);
            for (int k = 0; k < K; k++) {
              const double xv = x[static_cast<std::size_t>(m) * K + k];
              acc += xv * Wd[static_cast<std::size_t>(k) * N + n];
              mag += std::abs(xv) * Wmag[static_cast<std::size_t>(k) * N + n];
            }
            double want = acc;
            if (E == Epilogue::Gelu) want = sk::kernels::ref::gelu_tanh(static_cast<float>(acc));
            const std::size_t i = static_cast<std::size_t>(m) * N + n;
            if (E == Epilogue::Residual) want += init[i];
            // fp32 sum of K products in any order: |error| <= (K + c) u sum |x w|; c covers
            // the bias, the per-group scale and min terms, and the final store. gelu's slope
            // is below 1.13, the residual add rounds once more.
            double tol = 2 * (K + 8) * kU * mag * 1.13 + 2 * kU * std::abs(want) + 1e-30;
            if (E == Epilogue::Gelu) tol += 1e-6;  // gelu_tanh's own fp32 evaluation
            if (!(std::abs(out[i] - want) <= tol)) bad++;
            if (!(std::abs(out_host[i] - want) <= tol)) bad_host++;
          }
        CHECK(bad == 0);
        CHECK(bad_host == 0);
      }
    }
  }
}

// A row of x holding a NaN or an infinity (an overflowed activation) must not come out as finite
// numbers made from its other values: W8A8 gives that row's outputs not finite, on the host
// kernels and the oracle, and leaves the other rows as they were. The symmetric int8 rounding
// (shared with the int8 KV cache) turns such a group into a NaN scale, never converting a NaN to
// an integer.
TEST_CASE("w8a8 and symmetric int8: NaN and infinite inputs stay not finite") {
  const int K = 32, N = 20, M = 3;
  const auto W = w::Matrix<w::W8A8<w::PerChannel>>::from_f32(randn(K * N, 8), K, N);
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    auto x = randn(M * K, 9);
    const auto clean = x;
    x[K + 5] = bad;  // row 1
    for (int host = 0; host < 2; host++) {
      std::vector<float> out(M * N), ref(M * N);
      if (host) {
        const auto& P = sk::test::host_form(W);
        sk::kernels::host::linear<Epilogue::Store>(out.data(), x.data(), P, nullptr, M);
        sk::kernels::host::linear<Epilogue::Store>(ref.data(), clean.data(), P, nullptr, M);
      } else {
        sk::kernels::ref::linear<Epilogue::Store>(out.data(), x.data(), W, nullptr, M);
        sk::kernels::ref::linear<Epilogue::Store>(ref.data(), clean.data(), W, nullptr, M);
      }
      int finite = 0, changed = 0;
      for (int n = 0; n < N; n++) {
        finite += std::isfinite(out[N + n]);
        changed += std::bit_cast<uint32_t>(out[n]) != std::bit_cast<uint32_t>(ref[n]);
        changed +=
            std::bit_cast<uint32_t>(out[2 * N + n]) != std::bit_cast<uint32_t>(ref[2 * N + n]);
      }
      INFO((host ? "host" : "ref") << ", x holds " << bad);
      CHECK(finite == 0);
      CHECK(changed == 0);
    }
  }
  std::vector<float> g{1.f, std::nanf(""), -2.f};
  std::vector<int8_t> q(3, 5);
  CHECK(std::isnan(sk::quantize_s8(q.data(), g.data(), 3)));
  CHECK((q[0] == 0 && q[1] == 0 && q[2] == 0));
}

TEST_CASE("bad inputs name the tensor, the group size and K") {
  using G64 = w::U8ZeroPoint<w::Group<64>>;
  std::vector<float> v(100 * 8, 0.5f);
  REQUIRE_THROWS_WITH(w::Matrix<G64>::from_f32(v, 100, 8, "h.3.mlp.c_fc.weight"),
                      Catch::Contains("h.3.mlp.c_fc.weight") && Catch::Contains("G = 64") &&
                          Catch::Contains("K = 100"));
  REQUIRE_THROWS_WITH(w::Matrix<G64>::from_f32(v, 100, 8, "h.3.mlp.c_fc.weight"),
                      Catch::Contains("group64"));
  REQUIRE_THROWS_WITH(w::Matrix<w::F16>::from_f32(v, 10, 8, "h.0.attn.c_proj.weight"),
                      Catch::Contains("h.0.attn.c_proj.weight") && Catch::Contains("800 values") &&
                          Catch::Contains("(10, 8)"));
  REQUIRE_THROWS_WITH(w::Matrix<w::U8ZeroPoint<w::PerChannel>>::from_f32(v, 10, 8, "h.1.x"),
                      Catch::Contains("h.1.x") && Catch::Contains("(10, 8)"));
  REQUIRE_THROWS_WITH(w::Matrix<w::W8A8<w::PerChannel>>::from_f32(std::vector<float>(10 * 8, 0.5f),
                                                                  10, 8, "h.2.attn.c_attn.weight"),
                      Catch::Contains("h.2.attn.c_attn.weight") && Catch::Contains("K = 10") &&
                          Catch::Contains("multiple of 4"));
  REQUIRE_THROWS_WITH(
      w::Matrix<w::W8A8<w::Group<6>>>::from_f32(std::vector<float>(12 * 2, 1.f), 12, 2, "wg"),
      Catch::Contains("wg") && Catch::Contains("w8a8-group6") && Catch::Contains("multiple of 4"));
  v[17] = std::nanf("");
  REQUIRE_THROWS_WITH(
      w::Matrix<w::W8A8<w::PerChannel>>::from_f32(v, 100, 8, "wq8"),
      Catch::Contains("wq8") && Catch::Contains("non-finite") && Catch::Contains("(2, 1)"));
  REQUIRE_THROWS_WITH(
      w::Matrix<w::U8ZeroPoint<w::PerTensor>>::from_f32(v, 100, 8, "wq"),
      Catch::Contains("wq") && Catch::Contains("non-finite") && Catch::Contains("(2, 1)"));
}
