// SPDX-License-Identifier: Apache-2.0
// The host matmul (both paths: streamed bands for a few rows, register tiles for many) against
// a plain triple loop in double, on awkward sizes, for every epilogue.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "servekit/kernels/ref/linear.hpp"
#include "servekit/kernels/ref/matmul.hpp"

namespace k = servekit::kernels::ref;

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
  k::matmul<E>(out.data(), x.data(), W.data(), b.data(), M, K, N);
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
    for (auto [K, N] : {std::pair{1, 1}, {5, 33}, {64, 31}, {300, 257}, {513, 96}}) {
      check<k::Epilogue::Store>(M, K, N, rng);
      check<k::Epilogue::Gelu>(M, K, N, rng);
      check<k::Epilogue::Residual>(M, K, N, rng);
    }
}

// Batch invariance: a row's output is the same float whatever rows share the call and however
// many threads run it, in every weight format and on both paths (bands for M < 8, blocks for
// more). The engine's "a request gets its tokens alone" rests on this.
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
  const auto W = servekit::weights::Matrix<Fmt>::from_f32(Wf, K, N);
  auto run = [&](int M, int offset) {
    std::vector<float> out(M * N);
    k::linear<k::Epilogue::Gelu>(out.data(), x.data() + offset * K, W, b.data(), M,
                                 add.data() + offset * N);
    return out;
  };
  const auto all = run(kRows, 0);
  const int threads = servekit::host_threads();
  for (int T : {1, 2, 3}) {
    servekit::set_host_threads(T);
    for (int M : {1, 2, 3, 7, 8, 9, 16, 33})
      for (int offset : {0, kRows - M}) {
        const auto got = run(M, offset);
        for (int m = 0; m < M; m++)
          for (int n = 0; n < N; n++) {
            INFO(Fmt::name << " K " << K << " N " << N << ": row " << offset + m
                           << " of a call with M " << M << " on " << T << " threads, column " << n);
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
                   servekit::weights::U8ZeroPoint<servekit::weights::Group<64>>) {
  std::mt19937 rng(9);
  for (auto [K, N] : {std::pair{64, 96}, {128, 257}, {320, 1030}})
    check_invariant<TestType>(K, N, rng);
}
