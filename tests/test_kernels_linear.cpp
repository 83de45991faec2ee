// SPDX-License-Identifier: Apache-2.0
// Linear kernels under emulation (and, built by nvcc into test_kernels_cuda, on a GPU) against
// the host reference: the fp32 SIMT GEMM / GEMV and the fp16 / bf16 tensor-core GEMM, every
// epilogue, awkward shapes (no dimension a tile multiple), outputs poisoned with NaN (Residual:
// random, since it accumulates into out). Host data reaches the kernels through on() and
// upload() (tests/device_mirror.hpp, tests/device_ops.hpp).
#include <bit>
#include <cmath>
#include <utility>

#include "device_mirror.hpp"
#include "device_ops.hpp"
#include "servekit/backend/host.hpp"
#include "servekit/kernels/linear_mma.hpp"
#include "servekit/kernels/linear_simt.hpp"
#include "servekit/kernels/ref/linear.hpp"
#include "servekit/weights/formats.hpp"
#include "test_kernels_support.hpp"

namespace sk = servekit;
namespace kn = servekit::kernels;
using E = kn::Epilogue;
using namespace kernels_test;
using device_test::DeviceOps;
using device_test::on;
using device_test::upload;

namespace {

// out = epilogue(x W + b (+ add)) by the device backend's linear, every array mirrored.
template <E Ep, class Fmt>
void device_linear(std::vector<float>& out, const std::vector<float>& x,
                   const sk::weights::Matrix<Fmt>& W, const std::vector<float>& b, int M,
                   const std::vector<float>* add = nullptr, const kn::SplitK& split = {}) {
  const auto dW = upload(W);
  if (add)
    DeviceOps::linear<Ep>(on(out), on(x), dW, on(b), M, on(*add), split);
  else
    DeviceOps::linear<Ep>(on(out), on(x), dW, on(b), M, nullptr, split);
}

template <E Ep>
std::vector<float> initial_out(std::size_t n, std::mt19937& rng) {
  return Ep == E::Residual ? random_floats(n, rng) : poisoned(n);
}

template <E Ep>
void check_simt(int M, int K, int N, std::mt19937& rng) {
  INFO("fp32 epilogue " << static_cast<int>(Ep) << ": M = " << M << ", K = " << K << ", N = " << N);
  auto x = random_floats(static_cast<std::size_t>(M) * K, rng);
  auto W = sk::weights::Matrix<sk::weights::F32>::from_f32(
      random_floats(static_cast<std::size_t>(K) * N, rng), K, N);
  auto b = random_floats(N, rng);
  auto got = initial_out<Ep>(static_cast<std::size_t>(M) * N, rng), want = got;
  kn::linear_simt<Ep>({on(got), on(x), on(W.data), on(b), M, K, N});
  sk::kernels::ref::linear<Ep>(want.data(), x.data(), W, b.data(), M);
  // K products of magnitude <= 1 summed in another order: ~sqrt(K) ulp(1) apart.
  require_close(got, want, 1e-5f * std::sqrt(static_cast<float>(K)), 1e-5f);
}

// The tensor-core path rounds x to the weights' 16-bit type when it stages it (round to
// nearest: relative error at most u = 2^-11 for fp16, 2^-8 for bf16; the weights are already
// that type on both sides, so their products are exact in fp32). Hence per element
//   |got - want| <= (u + K 2^-24) sum_k |x_mk w_kn| + 1e-5 (1 + |want|),
// the second term of the first bracket and the last term for fp32 summation order. GELU's
// derivative is at most 1.13, so its error bound scales by that.
template <E Ep, class Fmt>
void check_mma(int M, int K, int N, std::mt19937& rng) {
  constexpr bool kBf16 = std::is_same_v<Fmt, sk::weights::BF16>;
  const float u = kBf16 ? std::ldexp(1.f, -8) : std::ldexp(1.f, -11);
  INFO(Fmt::name << " epilogue " << static_cast<int>(Ep) << ": M = " << M << ", K = " << K
                 << ", N = " << N);
  auto x = random_floats(static_cast<std::size_t>(M) * K, rng);
  auto W =
      sk::weights::Matrix<Fmt>::from_f32(random_floats(static_cast<std::size_t>(K) * N, rng), K, N);
  auto b = random_floats(N, rng);
  auto got = initial_out<Ep>(static_cast<std::size_t>(M) * N, rng), want = got;
  using Elem = typename decltype(W.data)::value_type;
  const auto w = on(std::as_const(W.data));
  const auto* w16 = reinterpret_cast<const std::uint16_t*>(static_cast<const Elem*>(w));
  kn::linear_mma<Ep, kBf16>({on(got), on(x), w16, on(b), M, K, N});
  sk::kernels::ref::linear<Ep>(want.data(), x.data(), W, b.data(), M);
  std::vector<float> mag(static_cast<std::size_t>(M) * N, 0.f);  // sum_k |x_mk w_kn|
  for (int m = 0; m < M; m++)
    for (int k = 0; k < K; k++)
      for (int n = 0; n < N; n++)
        mag[static_cast<std::size_t>(m) * N + n] +=
            std::abs(x[static_cast<std::size_t>(m) * K + k] * W.dequant(k, n));
  const float slope = Ep == E::Gelu ? 1.13f : 1.f;
  require_close(got, want, [&](std::size_t i) {
    return slope * (u + K * std::ldexp(1.f, -24)) * mag[i] + 1e-5f * (1.f + std::abs(want[i]));
  });
}

}  // namespace

TEST_CASE("fp32 SIMT linear (GEMV for M <= 8, tiled GEMM above) matches the reference",
          "[kernels][emulated][linear]") {
  std::mt19937 rng(11);
  for (int M : {1, 3, 8, 9, 33, 70})
    for (int K : {1, 17, 64, 257})
      for (int N : {1, 45, 130}) {
        check_simt<E::Store>(M, K, N, rng);
        check_simt<E::Gelu>(M, K, N, rng);
        check_simt<E::Residual>(M, K, N, rng);
      }
}

TEMPLATE_TEST_CASE("tensor-core linear matches the reference within the 16-bit rounding of x",
                   "[kernels][emulated][linear]", sk::weights::F16, sk::weights::BF16) {
  std::mt19937 rng(12);
  for (int M : {1, 5, 33, 70})
    for (int K : {1, 16, 40, 257})
      for (int N : {3, 8, 130}) {
        check_mma<E::Store, TestType>(M, K, N, rng);
        check_mma<E::Gelu, TestType>(M, K, N, rng);
        check_mma<E::Residual, TestType>(M, K, N, rng);
      }
}

// Bitwise: each row of a 40-row call against the same row computed in calls of 1..40 rows
// at other offsets. For fp32 that is the tiled GEMM against the GEMV (M <= 8); the tensor-core
// kernel serves every M. With a split-K scratch the launches of up to 64 rows (fp32: GEMV and
// tiled) or 128 (16-bit: four row tiles) give each (row tile, column tile, K part) a block, and
// must still give every row the bits of the unsplit 40-row call.
template <class Fmt>
void check_row_bits(int K, int N, std::mt19937& rng, bool split = false, int M = 40) {
  INFO(Fmt::name << ": M = " << M << ", K = " << K << ", N = " << N
                 << (split ? ", split-K scratch" : ""));
  const auto x = random_floats(static_cast<std::size_t>(M) * K, rng);
  const auto W =
      sk::weights::Matrix<Fmt>::from_f32(random_floats(static_cast<std::size_t>(K) * N, rng), K, N);
  const auto b = random_floats(N, rng);
  const auto dW = upload(W);
  const auto db = on(b);
  SplitScratch scratch;
  auto run = [&](float* out, int r0, int rows, bool reference) {
    DeviceOps::linear<E::Gelu>(
        on(out, static_cast<std::size_t>(rows) * N),
        on(x.data() + static_cast<std::size_t>(r0) * K, static_cast<std::size_t>(rows) * K), dW, db,
        rows, nullptr, split && !reference ? scratch.get() : kn::SplitK{});
  };
  CHECK(row_bits_differ(M, N, run) == 0);
  scratch.check(split);
}

TEST_CASE("a row of a device linear has the same bits whatever the call's row count",
          "[kernels][emulated][linear]") {
  std::mt19937 rng(31);
  for (int K : {24, 200, 768}) {
    check_row_bits<sk::weights::F32>(K, 70, rng);
    check_row_bits<sk::weights::F16>(K, 70, rng);
    check_row_bits<sk::weights::BF16>(K, 70, rng);
  }
}

// N = 96: rows of W 16-byte aligned, so the fp32 GEMV loads 4 columns at once; N = 70: one at
// a time. K = 200 ends in a short part.
TEST_CASE("a split-K launch gives a row the bits of the unsplit kernels",
          "[kernels][emulated][linear]") {
  std::mt19937 rng(32);
  for (int K : {200, 768})
    for (int N : {70, 96}) {
      check_row_bits<sk::weights::F32>(K, N, rng, true);
      check_row_bits<sk::weights::F16>(K, N, rng, true);
      check_row_bits<sk::weights::BF16>(K, N, rng, true);
    }
  check_row_bits<sk::weights::F32>(3072, 64, rng, true);
  // The tensor-core kernel splits up to four row tiles (a verify step of 16 x 5 rows).
  check_row_bits<sk::weights::F16>(200, 70, rng, true, 100);
}

// A decode launch's block may take several column tiles (the GEMV's warps side by side, the
// tensor-core kernel's 128 columns) and stage x once for them; every warp still sums as a
// block of one tile does. Widths 1 to 8 against 1, with and without a split over K, on rows of
// W that take vector loads (N = 96) and that do not (N = 300: 10 GEMV tiles, blocks of 3 leave
// one short, blocks of 8 idle warps), at 1, 5 (decode) and 40 rows (prefill: tiled / mma).
template <class Fmt>
void check_width_bits(int M, int K, int N, bool split, std::mt19937& rng) {
  INFO(Fmt::name << ": M = " << M << ", K = " << K << ", N = " << N
                 << (split ? ", split-K scratch" : ""));
  const auto x = random_floats(static_cast<std::size_t>(M) * K, rng);
  const auto W =
      sk::weights::Matrix<Fmt>::from_f32(random_floats(static_cast<std::size_t>(K) * N, rng), K, N);
  const auto b = random_floats(N, rng);
  auto run = [&](int tiles) {
    const kn::ForceTilesPerBlock force(tiles);
    SplitScratch scratch;
    auto out = poisoned(static_cast<std::size_t>(M) * N);
    device_linear<E::Gelu>(out, x, W, b, M, nullptr, split ? scratch.get() : kn::SplitK{});
    CHECK(scratch.counters_at_zero());
    return out;
  };
  const auto one = run(1);
  for (float v : one) REQUIRE(std::isfinite(v));
  for (int tiles : {2, 3, 8}) {
    INFO(tiles << " column tiles a block");
    const auto wide = run(tiles);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < one.size(); i++)
      differ += std::bit_cast<std::uint32_t>(one[i]) != std::bit_cast<std::uint32_t>(wide[i]);
    CHECK(differ == 0);
  }
}

TEST_CASE("a row's bits do not depend on how many column tiles a linear's block takes",
          "[kernels][emulated][linear]") {
  namespace w = sk::weights;
  std::mt19937 rng(34);
  for (int M : {1, 5, 40})
    for (int N : {96, 300})
      for (bool split : {false, true}) {
        check_width_bits<w::F32>(M, 768, N, split, rng);
        check_width_bits<w::F16>(M, 768, N, split, rng);
        check_width_bits<w::BF16>(M, 200, N, split, rng);
        check_width_bits<w::U8ZeroPoint<w::PerChannel>>(M, 768, N, split, rng);
        check_width_bits<w::U8ZeroPoint<w::Group<24>>>(M, 216, N, split, rng);
      }
}

TEST_CASE("linear launchers name the shape they cannot run", "[kernels][emulated][errors]") {
  float f = 0.f;
  std::uint16_t h = 0;
  REQUIRE_THROWS_WITH((kn::linear_simt<E::Store>({&f, &f, &f, nullptr, 4, 0, 8})),
                      Catch::Contains("kernels::linear_simt") && Catch::Contains("K = 0"));
  REQUIRE_THROWS_WITH((kn::linear_mma<E::Store, false>({&f, &f, &h, nullptr, 0, 16, 8})),
                      Catch::Contains("kernels::linear_mma (f16)") && Catch::Contains("M = 0"));
  REQUIRE_THROWS_WITH((kn::linear_mma<E::Gelu, true>({&f, &f, &h, nullptr, 2, 16, -1})),
                      Catch::Contains("kernels::linear_mma (bf16)") && Catch::Contains("N = -1"));
}

// The addend hook (a LoRA delta): out = epilogue(x W + b + add), on every linear kernel of both
// backends. Checked against each kernel's own result without the addend, so the only
// difference is where add enters: before GELU, inside the residual update.
TEMPLATE_TEST_CASE("every linear adds an addend before its epilogue", "[kernels][emulated][linear]",
                   sk::weights::F32, sk::weights::F16, sk::weights::BF16,
                   sk::weights::U8ZeroPoint<sk::weights::PerChannel>) {
  using Mat = sk::weights::Matrix<TestType>;
  std::mt19937 rng(31);
  auto run = [&]<class Ops>(Ops, int M, int K, int N) {
    constexpr bool host = std::is_same_v<Ops, sk::backend::Ops<sk::backend::Host>>;
    INFO(TestType::name << " " << (host ? "host" : "device") << ": M = " << M << ", K = " << K
                        << ", N = " << N);
    const auto x = random_floats(static_cast<std::size_t>(M) * K, rng);
    const auto W = Mat::from_f32(random_floats(static_cast<std::size_t>(K) * N, rng), K, N);
    const auto b = random_floats(N, rng), add = random_floats(static_cast<std::size_t>(M) * N, rng);
    const auto res = random_floats(static_cast<std::size_t>(M) * N, rng);
    std::vector<float> plain(res.size()), store(res.size()), gelu(res.size()), resid = res;
    auto linear = [&]<E Ep>(std::vector<float>& out, const std::vector<float>* a) {
      if constexpr (host)
        Ops::template linear<Ep>(out.data(), x.data(), W, b.data(), M, a ? a->data() : nullptr);
      else
        device_linear<Ep>(out, x, W, b, M, a);
    };
    linear.template operator()<E::Store>(plain, nullptr);
    linear.template operator()<E::Store>(store, &add);
    linear.template operator()<E::Gelu>(gelu, &add);
    linear.template operator()<E::Residual>(resid, &add);
    for (std::size_t i = 0; i < plain.size(); i++) {
      const float v = plain[i] + add[i], tol = 2e-6f * (1.f + std::abs(v) + std::abs(res[i]));
      REQUIRE(std::abs(store[i] - v) <= tol);
      REQUIRE(std::abs(gelu[i] - sk::kernels::ref::gelu_tanh(v)) <= tol);
      REQUIRE(std::abs(resid[i] - (res[i] + v)) <= tol);
    }
  };
  for (int M : {3, 33}) {  // the decode (GEMV) and prefill (tiled) shapes
    run(sk::backend::Ops<sk::backend::Host>{}, M, 64, 70);
    run(DeviceOps{}, M, 64, 70);
  }
}
