// SPDX-License-Identifier: Apache-2.0
// The host kernels (kernels/host/): the matmul on both shapes (one row streamed in bands, more
// rows in register tiles) against a plain triple loop in double, every format's linear against
// its oracle in kernels/ref/, lm_head likewise, on awkward sizes; batch invariance; the
// vector exp and GELU (kernels/host/vmath.hpp) against libm in double; layer norm.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "servekit/kernels/host/layernorm.hpp"
#include "servekit/kernels/host/linear.hpp"
#include "servekit/kernels/host/lm_head.hpp"
#include "servekit/kernels/host/vmath.hpp"
#include "servekit/kernels/ref/layernorm.hpp"
#include "servekit/kernels/ref/linear.hpp"
#include "servekit/kernels/ref/lm_head.hpp"
#include "support/host_form.hpp"

namespace k = servekit::kernels::host;
namespace ref = servekit::kernels::ref;
namespace w = servekit::weights;

namespace {
template <k::Epilogue E>
void check(int M, int K, int N, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(M * K), W(K * N), b(N), out(M * N), base(M * N);
  for (auto& v : x) v = u(rng);
  for (auto& v : W) v = u(rng);
  for (auto& v : b) v = u(rng);
  for (auto& v : base) v = u(rng);
  // Store and Gelu must write every element: start from NaN. Residual adds to base.
  for (int i = 0; i < M * N; i++)
    out[i] = E == k::Epilogue::Residual ? base[i] : std::numeric_limits<float>::quiet_NaN();
  k::matmul<E>(out.data(), x.data(), k::WeightView<float>{W.data(), K, N, K}, b.data(), M);
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double acc = b[n], mag = std::abs(b[n]);
      for (int kk = 0; kk < K; kk++) {
        acc += double(x[m * K + kk]) * W[kk * N + n];
        mag += std::abs(double(x[m * K + kk]) * W[kk * N + n]);
      }
      double want = acc;
      if (E == k::Epilogue::Gelu) want = k::gelu_tanh(static_cast<float>(acc));
      if (E == k::Epilogue::Residual) want = base[m * N + n] + acc;
      // fp32 sums of K + 1 terms in some order: |error| <= (K + 1) u sum |terms| (u = 2^-24),
      // GELU's slope is at most ~1.13, the residual add one more rounding.
      const double tol = 1.2 * (K + 2) * 0x1p-24 * (mag + std::abs(base[m * N + n])) + 1e-7;
      INFO("M " << M << " K " << K << " N " << N << " at (" << m << ", " << n << ")");
      REQUIRE(std::abs(out[m * N + n] - want) <= tol);
    }
}
}  // namespace

TEST_CASE("host matmul matches a double-precision loop for every epilogue and awkward shape") {
  std::mt19937 rng(5);
  for (int M : {1, 2, 3, 7, 8, 9, 16, 17, 33, 70})
    for (auto [K, N] : {std::pair{1, 1}, {5, 33}, {64, 31}, {300, 257}, {513, 96}, {96, 160}}) {
      check<k::Epilogue::Store>(M, K, N, rng);
      check<k::Epilogue::Gelu>(M, K, N, rng);
      check<k::Epilogue::Residual>(M, K, N, rng);
    }
}

// Batch invariance: a row's output is the same float whatever rows share the call and however
// many threads run it, in every weight format, on every path (bands for one row; row tiles
// reading packed strips in place (host/packed.hpp), one or many; in W's (K, N) order, one row
// tile reading W, more a widened block). The engine's "a request gets its tokens alone" rests on
// this.
namespace {
template <class Fmt>
void check_invariant(int K, int N, std::mt19937& rng) {
  constexpr int kRows = 40;
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(kRows * K), Wf(K * N), b(N), add(kRows * N);
  for (auto& v : x) v = u(rng);
  for (auto& v : Wf) v = u(rng);
  for (auto& v : b) v = u(rng);
  for (auto& v : add) v = u(rng);
  using Mat = servekit::weights::Matrix<Fmt>;
  const auto W = Mat::from_f32(Wf, K, N);
  const auto P = k::Packed<Mat>::pack(Mat::from_f32(Wf, K, N));  // the host backend's form
  auto run = [&](const auto& mat, int M, int offset) {
    std::vector<float> out(M * N);
    k::linear<k::Epilogue::Gelu>(out.data(), x.data() + offset * K, mat, b.data(), M,
                                 add.data() + offset * N);
    return out;
  };
  const auto all = run(servekit::test::host_form(W), kRows, 0);
  const int threads = servekit::host_threads();
  for (int T : {1, 2, 3}) {
    servekit::set_host_threads(T);
    for (int M : {1, 2, 3, 6, 7, 8, 9, 16, 33, 40})
      for (int offset : {0, kRows - M})
        for (bool packed : {false, true}) {
          const auto got =
              packed ? run(P, M, offset) : run(servekit::test::host_form(W), M, offset);
          for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
              INFO(Fmt::name << " K " << K << " N " << N << ": row " << offset + m
                             << " of a call with M " << M << " on " << T << " threads, column " << n
                             << (packed ? ", W packed" : ""));
              REQUIRE(std::bit_cast<uint32_t>(got[m * N + n]) ==
                      std::bit_cast<uint32_t>(all[(offset + m) * N + n]));
            }
        }
  }
  servekit::set_host_threads(threads);
}
}  // namespace

TEMPLATE_TEST_CASE("a row's result does not depend on the other rows or the thread count",
                   "[invariance]", servekit::weights::F32, servekit::weights::F16,
                   servekit::weights::BF16,
                   servekit::weights::U8ZeroPoint<servekit::weights::PerTensor>,
                   servekit::weights::U8ZeroPoint<servekit::weights::PerChannel>,
                   servekit::weights::U8ZeroPoint<servekit::weights::Group<64>>,
                   servekit::weights::W8A8<servekit::weights::PerChannel>,
                   servekit::weights::W8A8<servekit::weights::Group<64>>) {
  std::mt19937 rng(9);
  for (auto [K, N] : {std::pair{64, 96}, {128, 257}, {320, 1030}})
    check_invariant<TestType>(K, N, rng);
}

// Every format's host linear against the naive oracle, on shapes that leave partial tiles,
// panels and K blocks (and row blocks past 128), for every epilogue. Both sum each output as one
// fp32 chain (per group for zero-point codes; W8A8: exact int32 sums, then the same float
// chain of scales), so they differ only by FMA contraction.
namespace {
template <class Fmt, k::Epilogue E>
void check_vs_ref(int M, int K, int N, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(M * K), Wf(K * N), b(N), add(M * N), base(M * N);
  for (auto* v : {&x, &Wf, &b, &add, &base})
    for (auto& e : *v) e = u(rng);
  const auto W = w::Matrix<Fmt>::from_f32(Wf, K, N);
  std::vector<float> got = base, want = base;
  if (E != k::Epilogue::Residual)
    std::fill(got.begin(), got.end(), std::numeric_limits<float>::quiet_NaN());
  k::linear<E>(got.data(), x.data(), servekit::test::host_form(W), b.data(), M, add.data());
  ref::linear<E>(want.data(), x.data(), W, b.data(), M, add.data());
  int bad = 0, first = -1;  // counted, not one assertion each: a million outputs per format
  for (int i = 0; i < M * N; i++) {
    double mag = std::abs(b[i % N]) + std::abs(add[i]) + std::abs(base[i]);
    for (int kk = 0; kk < K; kk++) mag += std::abs(x[i / N * K + kk]) * 3.0;  // |q s| + |min| <= 3
    if (!(std::abs(got[i] - want[i]) <= 4 * (K + 4) * 0x1p-24 * mag * 1.13 + 1e-6)) {
      bad++;
      if (first < 0) first = i;
    }
  }
  INFO(Fmt::name << " M " << M << " K " << K << " N " << N << ": first bad output " << first);
  REQUIRE(bad == 0);
}
}  // namespace

TEMPLATE_TEST_CASE("host linear == its kernels/ref oracle, every format, awkward shapes",
                   "[oracle]", w::F32, w::F16, w::BF16, w::U8ZeroPoint<w::PerTensor>,
                   w::U8ZeroPoint<w::PerChannel>, w::U8ZeroPoint<w::Group<4>>,
                   w::U8ZeroPoint<w::Group<64>>, w::W8A8<w::PerTensor>, w::W8A8<w::PerChannel>,
                   w::W8A8<w::Group<4>>, w::W8A8<w::Group<64>>) {
  std::mt19937 rng(17);
  for (int M : {1, 2, 5, 6, 7, 8, 9, 13, 64, 67, 130})
    for (auto [K, N] : {std::pair{64, 31}, {256, 96}, {320, 257}, {576, 160}}) {
      check_vs_ref<TestType, k::Epilogue::Store>(M, K, N, rng);
      check_vs_ref<TestType, k::Epilogue::Gelu>(M, K, N, rng);
      check_vs_ref<TestType, k::Epilogue::Residual>(M, K, N, rng);
    }
}

// The gemm's column panels cover N in whole strips no wider than asked, and where tasks are few
// each thread gets as many (GPT-2's qkv, 2304 wide, on 2 threads: 12 panels of 192, not 9 of
// 256); widths with no equal split keep the plain one.
TEST_CASE("host gemm panels: whole strips over N, as many tasks a thread where they are few") {
  namespace kh = servekit::kernels::host;
  const int threads = servekit::host_threads();
  for (int T : {1, 2, 3, 4}) {
    servekit::set_host_threads(T);
    for (int strip : {16, 32})
      for (int m_blocks : {1, 2, 8})
        for (int N : {1, 33, 768, 2304, 3072, 1000, 50257}) {
          const kh::Panels p = kh::panels(N, m_blocks, 256, strip);
          INFO(N << " columns in strips of " << strip << ", " << m_blocks << " row blocks, " << T
                 << " threads: " << p.n << " panels of " << p.NB);
          REQUIRE(p.NB % strip == 0);
          REQUIRE(p.NB <= 256);
          REQUIRE(p.n * p.NB >= N);
          REQUIRE((p.n - 1) * p.NB < N);  // no empty panel
          const int strips = (N + strip - 1) / strip;
          bool equal_split = false;  // one that the rule may take: n .. 2n panels of whole strips
          for (int e = p.n; e <= std::min(strips, 2 * p.n); e++)
            equal_split |= strips % e == 0 && (m_blocks * e) % T == 0;
          if (m_blocks * p.n < 8 * T && equal_split) REQUIRE((m_blocks * p.n) % T == 0);
        }
  }
  servekit::set_host_threads(2);
  const kh::Panels qkv = kh::panels(2304, 1, 256, 32);
  CHECK(qkv.n == 12);
  CHECK(qkv.NB == 192);
  servekit::set_host_threads(threads);
}

TEST_CASE("host lm_head == its oracle, and a row's logits do not depend on the other rows") {
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto [V, C] : {std::pair{1, 1}, {67, 5}, {131, 40}, {300, 768}, {1000, 100}}) {
    constexpr int kRows = 11;
    std::vector<float> x(kRows * C), wte(V * C);
    for (auto& e : x) e = u(rng);
    for (auto& e : wte) e = u(rng);
    std::vector<float> all(kRows * V), want(kRows * V);
    k::lm_head(all.data(), x.data(), wte.data(), kRows, V, C);
    ref::lm_head(want.data(), x.data(), wte.data(), kRows, V, C);
    for (int i = 0; i < kRows * V; i++) {
      double mag = 0;
      for (int c = 0; c < C; c++) mag += std::abs(x[i / V * C + c] * wte[i % V * C + c]);
      INFO("V " << V << " C " << C << " logit " << i);
      REQUIRE(std::abs(all[i] - want[i]) <= 2 * (C + 2) * 0x1p-24 * mag + 1e-7);
    }
    for (int M : {1, 2, 3, 4, 5, 9})
      for (int offset : {0, kRows - M}) {
        std::vector<float> got(M * V);
        k::lm_head(got.data(), x.data() + offset * C, wte.data(), M, V, C);
        for (int i = 0; i < M * V; i++) {
          INFO("V " << V << " C " << C << " M " << M << " offset " << offset << " logit " << i);
          REQUIRE(std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(all[offset * V + i]));
        }
      }
  }
}

// The vector exp and GELU against double precision: e^x within 2 ulp over the whole normal
// range, the GELU within 4 ulp of its value (e^x's error, the add and the divide) plus what its
// fp32 argument's rounding makes of it, NaN kept, and
// every input giving the same float in every lane (the kernels' batch invariance rests on it).
namespace {
double ulp_of(double v) {
  return std::ldexp(1.0, std::max(std::ilogb(static_cast<float>(v)), -126) - 23);
}
}  // namespace

TEST_CASE("vector exp and gelu: accurate to a few ulp, the same in every lane") {
  int checked = 0;
  for (float x = -87.3f; x < 88.3f; x += 0.00137f) {
    const double want = std::exp(static_cast<double>(x));
    const float got = k::exp(k::vec{} + x)[k::kLanes - 1];
    INFO("exp(" << x << ") = " << got << ", want " << want);
    REQUIRE(std::abs(got - want) <= 2 * ulp_of(want));
    checked++;
  }
  CHECK(checked > 100000);
  // Below the normal range the result is clamped just above 2^-126, not rounded to zero.
  const float tiny = k::exp(k::vec{} - 200.f)[0];
  CHECK(tiny >= std::ldexp(1.f, -126));
  CHECK(tiny <= std::ldexp(1.0001f, -126));
  CHECK(std::isnan(k::exp(k::vec{} + std::numeric_limits<float>::quiet_NaN())[0]));

  auto gelu = [](double x) {  // 0.5 x (1 + tanh y) in the form without its cancellation
    return x / (1 + std::exp(-2 * 0.7978845608028654 * (x + 0.044715 * x * x * x)));
  };
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-12.f, 12.f);
  for (int i = 0; i < 200000; i++) {
    const float x = i < 100000 ? -12.f + 24.f * i / 100000 : u(rng);
    const double want = gelu(x);
    k::vec v;
    for (int l = 0; l < k::kLanes; l++) v[l] = x + l * 0.001f;
    const k::vec got = k::gelu_tanh(v);
    INFO("gelu(" << x << ") = " << got[0] << ", want " << want);
    // Beyond the 4 ulp: y = sqrt(2/pi) (x + 0.044715 x^3) is itself computed in fp32 (4
    // roundings, as in the reference's tanh form), and for x < 0 the value e^(2y) scales with
    // it: a relative error of 2 |y| times y's, up to ~6e-6 at x = -12.
    const double y = 0.7978845608028654 * (x + 0.044715 * double(x) * x * x);
    // Below x ~ -11.6, e^(-2y) passes 2^127.5 and is clamped there: the GELU is then some
    // value under 2^-120 instead of a smaller one.
    const double tol = 4 * ulp_of(want) + std::abs(want) * 2 * std::abs(y) * 4 * 0x1p-24 + 0x1p-120;
    REQUIRE(std::abs(got[0] - want) <= tol);
    for (int l = 0; l < k::kLanes; l++) {
      k::vec w = k::vec{} + 1.f;
      w[k::kLanes - 1 - l] = v[l];
      REQUIRE(std::bit_cast<uint32_t>(k::gelu_tanh(w)[k::kLanes - 1 - l]) ==
              std::bit_cast<uint32_t>(got[l]));
    }
    REQUIRE(std::bit_cast<uint32_t>(k::gelu_tanh(x)) == std::bit_cast<uint32_t>(got[0]));
  }
  CHECK(std::isnan(k::gelu_tanh(std::numeric_limits<float>::quiet_NaN())));
  // gelu_row: a row whose length is no multiple of kLanes, in place, tail included.
  std::vector<float> row(3 * k::kLanes + 5), want(row.size());
  for (std::size_t i = 0; i < row.size(); i++) row[i] = -6.f + 0.37f * i;
  for (std::size_t i = 0; i < row.size(); i++) want[i] = k::gelu_tanh(row[i]);
  k::gelu_row(row.data(), row.data(), static_cast<int>(row.size()));
  for (std::size_t i = 0; i < row.size(); i++)
    REQUIRE(std::bit_cast<uint32_t>(row[i]) == std::bit_cast<uint32_t>(want[i]));
}

TEST_CASE("host layernorm: the reference's values to rounding, a row's bits whatever its batch") {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-3.f, 5.f);
  for (int C : {1, 7, k::kLanes, 3 * k::kLanes + 5, 768}) {
    const int N = 9;
    std::vector<float> x(N * C), w(C), b(C), got(N * C, NAN), want(N * C), alone(C, NAN);
    for (auto* v : {&x, &w, &b})
      for (auto& e : *v) e = u(rng);
    for (int c = 0; c < C; c++) x[4 * C + c] += 1000.f;  // a large residual stream: mean >> spread
    k::layernorm(got.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
    ref::layernorm(want.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
    INFO("C " << C);
    for (int i = 0; i < N * C; i++) {
      // |x - mean| rstd is at most sqrt(C); sums in another order move mean and var by C ulp.
      const double tol = 16 * (C + 4) * 0x1p-24 * (std::abs(w[i % C]) * std::sqrt(C) + 1);
      REQUIRE(std::abs(got[i] - want[i]) <= tol);
    }
    k::layernorm(alone.data(), x.data() + 4 * C, w.data(), b.data(), 1, C, 1e-5f);
    for (int c = 0; c < C; c++)
      REQUIRE(std::bit_cast<uint32_t>(alone[c]) == std::bit_cast<uint32_t>(got[4 * C + c]));
  }
}

// W8A8's sums are integers, exact in any order, so the host kernels must give exactly the
// float chain written out here, s_x * fma-chain(s_w[g] * float(isum_g)), on whatever
// instructions this build chose (VNNI, AVX2 or plain loops): each ISA build passing this gives
// the same bits as every other.
TEMPLATE_TEST_CASE("w8a8: the host kernels give the integer sums' float chain exactly", "",
                   w::W8A8<w::PerChannel>, w::W8A8<w::Group<8>>) {
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto [K, N] : {std::pair{8, 1}, {64, 40}, {200, 130}})
    for (int M : {1, 2, 7, 70}) {
      std::vector<float> x(static_cast<std::size_t>(M) * K), Wf(static_cast<std::size_t>(K) * N);
      for (auto& v : x) v = nd(rng);
      for (auto& v : Wf) v = nd(rng);
      x[0] = 0.f * x[0];  // a row's first feature zero, and below a row of zeros
      if (M > 1)
        for (int k = 0; k < K; k++) x[K + k] = 0.f;
      const auto W = w::Matrix<TestType>::from_f32(Wf, K, N);
      std::vector<float> got(static_cast<std::size_t>(M) * N);
      k::linear<k::Epilogue::Store>(got.data(), x.data(), servekit::test::host_form(W), nullptr, M);
      int bad = 0;
      std::vector<int8_t> xq(K);
      for (int m = 0; m < M; m++) {
        const float sx = servekit::quantize_s8(xq.data(), x.data() + m * K, K);
        for (int n = 0; n < N; n++) {
          float acc = 0.f;
          for (int g0 = 0; g0 < K; g0 += W.group_rows) {
            int64_t isum = 0;
            for (int kk = g0; kk < g0 + W.group_rows; kk++)
              isum += int64_t{xq[kk]} * W.q[static_cast<std::size_t>(kk) * N + n];
            acc = std::fma(W.scale[W.state_index(g0, n)], static_cast<float>(isum), acc);
          }
          std::vector<float> y{acc * sx};  // through memory: no contraction with the add
          const float want = y[0] + 0.f;
          if (std::bit_cast<uint32_t>(got[m * N + n]) != std::bit_cast<uint32_t>(want)) bad++;
        }
      }
      INFO(TestType::name << " M " << M << " K " << K << " N " << N << " on " << k::kI8Isa);
      CHECK(bad == 0);
    }
}

// The largest products the codes allow: x and w all +-127, and row 1's products all of one sign
// in every column (positive in even ones, negative in odd ones), so each int16 pair on AVX2's
// vpmaddubsw step is +-2 x 127 x 127 = +-32258, just inside its saturation (x + 128 against w
// there would saturate), and the int32 sums reach K x 16129.
TEST_CASE("w8a8: codes of +-127 everywhere give the exact sums on every ISA") {
  for (int K : {4, 64, 768}) {
    const int N = 48, M = 3;
    std::vector<float> x(static_cast<std::size_t>(M) * K), Wf(static_cast<std::size_t>(K) * N);
    for (int m = 0; m < M; m++)
      for (int kk = 0; kk < K; kk++) x[m * K + kk] = (m == 1 && kk % 3 == 0) ? -1.f : 1.f;
    for (int kk = 0; kk < K; kk++)
      for (int n = 0; n < N; n++) Wf[kk * N + n] = (n % 2 == 0) == (kk % 3 == 0) ? -2.f : 2.f;
    const auto W = w::Matrix<w::W8A8<w::PerChannel>>::from_f32(Wf, K, N);
    std::vector<float> got(static_cast<std::size_t>(M) * N);
    k::linear<k::Epilogue::Store>(got.data(), x.data(), servekit::test::host_form(W), nullptr, M);
    std::vector<int8_t> xq(K);
    for (int m = 0; m < M; m++) {
      const float sx = servekit::quantize_s8(xq.data(), x.data() + m * K, K);
      for (int n = 0; n < N; n++) {
        int64_t isum = 0;
        for (int kk = 0; kk < K; kk++) {
          const int8_t wq = W.q[static_cast<std::size_t>(kk) * N + n];
          REQUIRE((std::abs(xq[kk]) == 127 && std::abs(wq) == 127));
          isum += int64_t{xq[kk]} * wq;
        }
        std::vector<float> y{std::fma(W.scale[W.state_index(0, n)], static_cast<float>(isum), 0.f) *
                             sx};  // through memory: no contraction
        INFO("K " << K << " row " << m << " column " << n << " on " << k::kI8Isa);
        REQUIRE(std::bit_cast<uint32_t>(got[m * N + n]) == std::bit_cast<uint32_t>(y[0] + 0.f));
      }
    }
  }
}
