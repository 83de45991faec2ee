// SPDX-License-Identifier: Apache-2.0
// The 8-bit linear kernels under emulation. Zero-point uint8 (GEMV for M <= 8, tiled GEMM
// above) against the host reference on the same quantised Matrix: per tensor, per channel and
// groups of several sizes (some smaller than a k tile, some not dividing it), every epilogue,
// awkward shapes, outputs poisoned with NaN (Residual: random, since it accumulates into out).
// Built by nvcc into test_kernels_cuda, the same cases run on a GPU: host data reaches the kernels
// through on() and upload() (tests/device_mirror.hpp, tests/device_ops.hpp). W8A8 (dp4a) at
// the end of the file: the oracle's bits exactly.
#include <bit>
#include <cmath>
#include <utility>

#include "device_mirror.hpp"
#include "device_ops.hpp"
#include "servekit/kernels/linear_i8.hpp"
#include "servekit/kernels/linear_u8.hpp"
#include "servekit/kernels/ref/linear.hpp"
#include "servekit/weights/u8_zero_point.hpp"
#include "servekit/weights/w8a8.hpp"
#include "test_kernels_support.hpp"

namespace sk = servekit;
namespace kn = servekit::kernels;
namespace w = servekit::weights;
using E = kn::Epilogue;
using namespace kernels_test;
using device_test::DeviceOps;
using device_test::on;
using device_test::upload;

namespace {

// Weights whose groups really differ: the magnitude grows with k (so groups of consecutive
// rows get different scales), each column has its own offset (so mins differ per column and
// per tensor is a poor fit), and column 0 is constant (max == min: scale 0, every q = 0).
std::vector<float> weights_for(int K, int N, std::mt19937& rng) {
  auto v = random_floats(static_cast<std::size_t>(K) * N, rng);
  for (int k = 0; k < K; k++)
    for (int n = 0; n < N; n++) {
      float& x = v[static_cast<std::size_t>(k) * N + n];
      x = n == 0 ? 0.25f : x * (1.f + static_cast<float>(k % 7)) * 0.25f + 0.1f * (n % 5);
    }
  return v;
}

template <class Mat>
kn::LinearU8Params params(float* out, const float* x, const Mat& W, const float* b, int M) {
  return {out, x,      W.q.data(), W.scale.data(), W.zero.data(), b,
          M,   W.rows, W.cols,     W.group_rows,   W.state_cols};
}

// Both sides compute, per group, scale * sum_k x q + min * sum_k x in fp32 and add the groups
// up; they differ only in summation order (slices, tiles, group folds). Each sum of at most K
// terms is off by at most ~K u times the sum of its terms' magnitudes, the products and the
// fold add a few roundings, and at most K groups are added: per side (2K + 4) u mag with
//   mag = sum_k |x_k| (q_kn scale + |min|)   (the magnitudes actually summed, not |w'|)
// and u = 2^-24; twice that for two sides, x 1.13 for GELU (its largest slope), plus
// 1e-5 (1 + |want|) for the bias add and the epilogue.
template <E Ep, bool kViaOps = false, class Mat>
void check_u8(const Mat& W, int M, std::mt19937& rng) {
  const int K = W.rows, N = W.cols;
  INFO("epilogue " << static_cast<int>(Ep) << ": M = " << M << ", K = " << K << ", N = " << N
                   << ", G = " << W.group_rows << ", state columns " << W.state_cols);
  auto x = random_floats(static_cast<std::size_t>(M) * K, rng);
  auto b = random_floats(N, rng);
  auto got = Ep == E::Residual ? random_floats(static_cast<std::size_t>(M) * N, rng)
                               : poisoned(static_cast<std::size_t>(M) * N);
  auto want = got;
  if constexpr (kViaOps) {
#if !defined(__CUDACC__)
    sk::backend::Ops<sk::backend::Emulated>::linear<Ep>(got.data(), x.data(), W, b.data(), M);
#endif
  } else {
    const auto dW = upload(W);
    kn::linear_u8<Ep>(params(on(got), on(std::as_const(x)), dW, on(std::as_const(b)), M));
  }
  kn::ref::linear<Ep>(want.data(), x.data(), W, b.data(), M);
  std::vector<float> mag(static_cast<std::size_t>(M) * N, 0.f);
  for (int m = 0; m < M; m++)
    for (int k = 0; k < K; k++)
      for (int n = 0; n < N; n++) {
        const std::size_t s = W.state_index(k, n);
        mag[static_cast<std::size_t>(m) * N + n] +=
            std::abs(x[static_cast<std::size_t>(m) * K + k]) *
            (W.q[static_cast<std::size_t>(k) * N + n] * W.scale[s] + std::abs(W.zero[s]));
      }
  const float slope = Ep == E::Gelu ? 1.13f : 1.f;
  const float u = std::ldexp(1.f, -24);
  require_close(got, want, [&](std::size_t i) {
    return slope * 2 * (2 * K + 4) * u * mag[i] + 1e-5f * (1.f + std::abs(want[i]));
  });
}

template <class Fmt>
void check_format(std::initializer_list<int> Ks, std::mt19937& rng) {
  for (int K : Ks)
    for (int N : {1, 45, 130}) {
      const auto W = w::Matrix<Fmt>::from_f32(weights_for(K, N, rng), K, N);
      for (int M : {1, 3, 8, 9, 33}) {
        check_u8<E::Store>(W, M, rng);
        check_u8<E::Gelu>(W, M, rng);
        check_u8<E::Residual>(W, M, rng);
      }
    }
}

}  // namespace

TEST_CASE("uint8 linear per tensor and per channel matches the reference",
          "[kernels][emulated][linear][u8]") {
  std::mt19937 rng(21);
  SECTION("per tensor") {
    check_format<w::U8ZeroPoint<w::PerTensor>>({1, 17, 64, 257}, rng);
  }
  SECTION("per channel") {
    check_format<w::U8ZeroPoint<w::PerChannel>>({1, 17, 64, 257}, rng);
  }
}

TEST_CASE("uint8 linear with groups matches the reference", "[kernels][emulated][linear][u8]") {
  std::mt19937 rng(22);
  // G = 1 and 3: several groups per k tile and per GEMV slice step; 24: groups straddle
  // tiles; 32: the size the invariant tests use, two k tiles per group.
  SECTION("G = 1") {
    check_format<w::U8ZeroPoint<w::Group<1>>>({1, 19}, rng);
  }
  SECTION("G = 3") {
    check_format<w::U8ZeroPoint<w::Group<3>>>({3, 51, 261}, rng);
  }
  SECTION("G = 24") {
    check_format<w::U8ZeroPoint<w::Group<24>>>({24, 72, 264}, rng);
  }
  SECTION("G = 32") {
    check_format<w::U8ZeroPoint<w::Group<32>>>({32, 96}, rng);
  }
}

// Bitwise: each row of a 40-row call (tiled GEMM, unsplit) against the same row computed in
// calls of 1..40 rows at other offsets (GEMV for up to 8, then tiled; with a split-K scratch
// each shares K among blocks),
// with groups that end inside a K slice, at its end, and span slices (per tensor / per channel).
template <class Fmt>
void check_row_bits(int K, int N, std::mt19937& rng, bool split = false) {
  INFO("K = " << K << ", N = " << N << (split ? ", split-K scratch" : ""));
  constexpr int M = 40;
  const auto W = w::Matrix<Fmt>::from_f32(weights_for(K, N, rng), K, N);
  const auto x = random_floats(static_cast<std::size_t>(M) * K, rng);
  const auto b = random_floats(N, rng);
  const auto dW = upload(W);
  const auto db = on(b);
  SplitScratch scratch;
  CHECK(row_bits_differ(M, N, [&](float* out, int r0, int rows, bool reference) {
          kn::linear_u8<E::Gelu>(params(on(out, static_cast<std::size_t>(rows) * N),
                                        on(x.data() + static_cast<std::size_t>(r0) * K,
                                           static_cast<std::size_t>(rows) * K),
                                        dW, db, rows),
                                 nullptr, split && !reference ? scratch.get() : kn::SplitK{});
        }) == 0);
  scratch.check(split);
}

TEST_CASE("a row of the uint8 linear has the same bits whatever the call's row count",
          "[kernels][emulated][linear][u8]") {
  std::mt19937 rng(24);
  for (int K : {24, 200, 768}) {
    check_row_bits<w::U8ZeroPoint<w::PerTensor>>(K, 70, rng);
    check_row_bits<w::U8ZeroPoint<w::PerChannel>>(K, 70, rng);
    check_row_bits<w::U8ZeroPoint<w::Group<8>>>(K, 70, rng);
  }
  check_row_bits<w::U8ZeroPoint<w::Group<24>>>(768, 70, rng);  // groups cross slice ends
  check_row_bits<w::U8ZeroPoint<w::Group<64>>>(768, 70, rng);
}

// N = 96: 4 codes per load; 70: one at a time. Parts of 64 rows at K = 768 end inside groups
// of 24 and hold several groups of 8.
TEST_CASE("a split-K uint8 launch gives a row the bits of the unsplit kernels",
          "[kernels][emulated][linear][u8]") {
  std::mt19937 rng(25);
  for (int N : {70, 96}) {
    check_row_bits<w::U8ZeroPoint<w::PerTensor>>(200, N, rng, true);
    check_row_bits<w::U8ZeroPoint<w::PerChannel>>(768, N, rng, true);
    check_row_bits<w::U8ZeroPoint<w::Group<8>>>(768, N, rng, true);
    check_row_bits<w::U8ZeroPoint<w::Group<24>>>(768, N, rng, true);
  }
}

#if !defined(__CUDACC__)
TEST_CASE("Ops<Emulated>::linear runs the uint8 kernel on a Matrix",
          "[kernels][emulated][u8][emulator]") {
  std::mt19937 rng(23);
  const auto W =
      w::Matrix<w::U8ZeroPoint<w::Group<32>>>::from_f32(weights_for(64, 40, rng), 64, 40);
  check_u8<E::Store, true>(W, 5, rng);
  check_u8<E::Gelu, true>(W, 20, rng);
}
#endif

TEST_CASE("uint8 linear launcher names what it cannot run", "[kernels][emulated][u8][errors]") {
  float f = 0.f;
  std::uint8_t q = 0;
  auto p = [&](int M, int K, int N, int G, int S) {
    return kn::LinearU8Params{&f, &f, &q, &f, &f, nullptr, M, K, N, G, S};
  };
  REQUIRE_THROWS_WITH(kn::linear_u8<E::Store>(p(0, 16, 8, 16, 8)),
                      Catch::Contains("kernels::linear_u8") && Catch::Contains("M = 0"));
  REQUIRE_THROWS_WITH(kn::linear_u8<E::Gelu>(p(2, 48, 8, 32, 8)),
                      Catch::Contains("kernels::linear_u8") && Catch::Contains("G = 32") &&
                          Catch::Contains("K = 48"));
  REQUIRE_THROWS_WITH(kn::linear_u8<E::Residual>(p(2, 64, 8, 0, 8)),
                      Catch::Contains("G = 0") && Catch::Contains("K = 64"));
  REQUIRE_THROWS_WITH(kn::linear_u8<E::Store>(p(2, 64, 8, 64, 3)),
                      Catch::Contains("kernels::linear_u8") && Catch::Contains("3 (scale, min)") &&
                          Catch::Contains("N = 8"));
}

// W8A8 (linear_i8.hpp): integer sums are exact, and the kernel's float chain is the oracle's
// (fma(s_w, isum, acc) per group, times s_x), so without a bias or an addend (whose adds the
// compiler may fuse differently on each side) every output has the oracle's bits; with them,
// and through GELU, it is within a few roundings of the value. Shapes: columns past one block
// (256; 64 on tensor cores) and not a multiple of 4 (bytewise loads), rows past a row tile (8;
// 32), groups of 4 rows; 16 rows or more with groups of whole k32 steps take the tensor-core
// kernel (G = K = 96 or 256, G = 32, 64), the others dp4a, split over K up to 8 rows where
// groups are whole multiples of 32 (parts of 32 k up to 4 rows, 64 above when G allows).
namespace {
template <E Ep, class Fmt>
void check_i8(int M, int K, int N, bool extras, std::mt19937& rng) {
  INFO(Fmt::name << " epilogue " << static_cast<int>(Ep) << ": M = " << M << ", K = " << K
                 << ", N = " << N << (extras ? ", with bias and addend" : ""));
  const auto W = w::Matrix<Fmt>::from_f32(weights_for(K, N, rng), K, N);
  auto x = random_floats(static_cast<std::size_t>(M) * K, rng);
  for (int k = 0; k < K; k++) x[k] = 0.f;  // row 0 all zero: scale 0, codes 0
  const auto b = random_floats(N, rng);
  const auto add = random_floats(static_cast<std::size_t>(M) * N, rng);
  auto got = Ep == E::Residual ? random_floats(static_cast<std::size_t>(M) * N, rng)
                               : poisoned(static_cast<std::size_t>(M) * N);
  auto want = got;
  const auto dW = upload(W);
  SplitScratch scratch;
  const float* bp = extras ? b.data() : nullptr;
  const float* ap = extras ? add.data() : nullptr;
  {
    const auto db = on(b);
    const auto da = on(add);
    kn::linear_i8<Ep>({on(got), on(std::as_const(x)), dW.q.data(), dW.scale.data(),
                       extras ? static_cast<const float*>(db) : nullptr, M, K, N, dW.group_rows,
                       dW.state_cols, extras ? static_cast<const float*>(da) : nullptr},
                      nullptr, scratch.get());
  }
  kn::ref::linear<Ep>(want.data(), x.data(), W, bp, M, ap);
  if (!extras && Ep == E::Store) {
    std::size_t differ = 0;
    for (std::size_t i = 0; i < got.size(); i++)
      differ += std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i]);
    REQUIRE(differ == 0);
  } else {
    require_close(got, want, 1e-5f, 4e-7f);
  }
}

template <class Fmt>
void check_i8_format(std::initializer_list<int> Ks, std::mt19937& rng) {
  for (int K : Ks)
    for (int N : {1, 45, 130, 600})
      for (int M : {1, 3, 8, 9, 16, 33}) {
        check_i8<E::Store, Fmt>(M, K, N, false, rng);
        check_i8<E::Store, Fmt>(M, K, N, true, rng);
        check_i8<E::Gelu, Fmt>(M, K, N, true, rng);
        check_i8<E::Residual, Fmt>(M, K, N, true, rng);
      }
}
}  // namespace

TEST_CASE("w8a8 linear (dp4a) gives the oracle's bits", "[kernels][emulated][linear][w8a8]") {
  std::mt19937 rng(26);
  check_i8_format<w::W8A8<w::PerTensor>>({4, 68, 96}, rng);
  check_i8_format<w::W8A8<w::PerChannel>>({8, 260, 256}, rng);
  check_i8_format<w::W8A8<w::Group<4>>>({16}, rng);
  check_i8_format<w::W8A8<w::Group<32>>>({64}, rng);
  check_i8_format<w::W8A8<w::Group<64>>>({192}, rng);
}

// Each row of a 40-row call against the same row in calls of 1..40 rows at other offsets (the
// tensor-core kernel from 16 rows, dp4a below, split over K up to 8 rows: the same bits from
// each), and a row holding a NaN
// or an infinity: not finite there, the other rows as without it.
TEST_CASE("w8a8 linear: a row's bits do not depend on the call; NaN stays in its row",
          "[kernels][emulated][linear][w8a8]") {
  std::mt19937 rng(27);
  constexpr int M = 40, K = 128, N = 70;
  const auto W = w::Matrix<w::W8A8<w::Group<32>>>::from_f32(weights_for(K, N, rng), K, N);
  auto x = random_floats(static_cast<std::size_t>(M) * K, rng);
  const auto b = random_floats(N, rng);
  const auto dW = upload(W);
  const auto db = on(b);
  SplitScratch scratch;
  auto run = [&](float* out, const float* xs, int rows) {
    kn::linear_i8<E::Gelu>(
        {on(out, static_cast<std::size_t>(rows) * N), on(xs, static_cast<std::size_t>(rows) * K),
         dW.q.data(), dW.scale.data(), db, rows, K, N, dW.group_rows, dW.state_cols},
        nullptr, scratch.get());
  };
  CHECK(row_bits_differ(M, N, [&](float* out, int r0, int rows, bool) {
          run(out, x.data() + static_cast<std::size_t>(r0) * K, rows);
        }) == 0);
  scratch.check(true);  // the calls of up to 8 rows split K
  auto clean = poisoned(static_cast<std::size_t>(M) * N);
  run(clean.data(), x.data(), M);
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    auto xb = x;
    xb[5 * K + 7] = bad;
    auto out = poisoned(static_cast<std::size_t>(M) * N);
    run(out.data(), xb.data(), M);
    for (int m = 0; m < M; m++)
      for (int n = 0; n < N; n++) {
        const std::size_t i = static_cast<std::size_t>(m) * N + n;
        INFO("bad value " << bad << ": row " << m << " column " << n);
        if (m == 5)
          REQUIRE(!std::isfinite(out[i]));
        else
          REQUIRE(std::bit_cast<uint32_t>(out[i]) == std::bit_cast<uint32_t>(clean[i]));
      }
  }
}

TEST_CASE("w8a8 linear launcher names what it cannot run", "[kernels][emulated][w8a8][errors]") {
  float f = 0.f;
  std::int8_t q = 0;
  SplitScratch scratch;
  auto p = [&](int M, int K, int N, int G, int S) {
    return kn::LinearI8Params{&f, &f, &q, &f, nullptr, M, K, N, G, S};
  };
  REQUIRE_THROWS_WITH(kn::linear_i8<E::Store>(p(0, 16, 8, 16, 8), nullptr, scratch.get()),
                      Catch::Contains("kernels::linear_i8") && Catch::Contains("M = 0"));
  REQUIRE_THROWS_WITH(kn::linear_i8<E::Store>(p(2, 48, 8, 6, 8), nullptr, scratch.get()),
                      Catch::Contains("G = 6") && Catch::Contains("K = 48"));
  REQUIRE_THROWS_WITH(kn::linear_i8<E::Store>(p(2, 64, 8, 64, 3), nullptr, scratch.get()),
                      Catch::Contains("3 scale columns") && Catch::Contains("N = 8"));
  REQUIRE_THROWS_WITH(kn::linear_i8<E::Store>(p(2, 64, 8, 64, 8), nullptr, kn::SplitK{}),
                      Catch::Contains("kernels::linear_i8") && Catch::Contains("M = 2 rows") &&
                          Catch::Contains("given 0"));
}

// Which decode launches split K, in parts of how many k: GPT-2 small's linears take parts of 32
// at one row (3 to 12 column blocks each), longer ones with more rows; lm_head's 197 column
// blocks take few long parts; more than 8 rows, groups that are no multiple of 32 rows, or a K
// of one part do not split.
TEST_CASE("w8a8 split parts: enough blocks, few parts", "[kernels][w8a8]") {
  CHECK(kn::i8_part_len(1, 768, 768, 768) == 32);
  CHECK(kn::i8_part_len(8, 3072, 768, 3072) == 128);  // 8 rows: parts of at least 128 k
  CHECK(kn::i8_part_len(3, 3072, 768, 3072) == 32);
  CHECK(kn::i8_part_len(4, 768, 768, 768) == 64);
  CHECK(kn::i8_part_len(1, 768, 50257, 768) == 256);  // 3 parts x 197 column blocks
  CHECK(kn::i8_part_len(1, 768, 50257 * 2, 768) == 0);
  CHECK(kn::i8_part_len(9, 768, 768, 768) == 0);
  CHECK(kn::i8_part_len(1, 768, 768, 16) == 0);
  CHECK(kn::i8_part_len(1, 768, 768, 96) == 32);
  CHECK(kn::i8_part_len(1, 32, 768, 32) == 0);
  // The scratch holds the largest split launch's sums, whatever the step's row count.
  CHECK(kn::i8_scratch_floats(64, 768, 768, 768) >=
        kn::i8_scratch_floats(8, 768, 768, 768) + 56 * 768 / 4);
  CHECK(kn::i8_scratch_floats(8, 768, 768, 768) == 8 + 8 * 768 / 4 + 6 * 8 * 768);
}

#if !defined(__CUDACC__)
TEST_CASE("Ops<Emulated>::linear runs the w8a8 kernel on a Matrix, in the scratch it sizes",
          "[kernels][emulated][w8a8][emulator]") {
  std::mt19937 rng(28);
  using Mat = w::Matrix<w::W8A8<w::PerChannel>>;
  using Ops = sk::backend::Ops<sk::backend::Emulated>;
  const int M = 6, K = 96, N = 50;
  const auto W = Mat::from_f32(weights_for(K, N, rng), K, N);
  const auto x = random_floats(static_cast<std::size_t>(M) * K, rng);
  const auto [floats, counters] = Ops::split_k_size<Mat>(M, K, N);
  std::vector<float> part(floats);
  std::vector<float> got(static_cast<std::size_t>(M) * N), want(got.size());
  Ops::linear<E::Store>(got.data(), x.data(), W, nullptr, M, nullptr,
                        kn::SplitK{part.data(), nullptr, part.size(), counters});
  kn::ref::linear<E::Store>(want.data(), x.data(), W, nullptr, M);
  for (std::size_t i = 0; i < got.size(); i++)
    REQUIRE(std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(want[i]));
}
#endif
