// SPDX-License-Identifier: Apache-2.0
// Embedding, layernorm, kv_append, lm_head and argmax kernels under emulation against the host
// reference (kernels/ref), on awkward sizes, outputs poisoned with NaN before each run.
#include <algorithm>

#include "servekit/kernels/embedding.hpp"
#include "servekit/kernels/kv_append.hpp"
#include "servekit/kernels/layernorm.hpp"
#include "servekit/kernels/lm_head.hpp"
#include "servekit/kernels/ref/attention.hpp"
#include "servekit/kernels/ref/embedding.hpp"
#include "servekit/kernels/ref/layernorm.hpp"
#include "servekit/kernels/ref/lm_head.hpp"
#include "servekit/kernels/sampling.hpp"
#include "servekit/serve/sampling.hpp"
#include "device_mirror.hpp"
#include "test_kernels_support.hpp"

namespace sk = servekit;
namespace kn = servekit::kernels;
using namespace kernels_test;
using device_test::on;

TEST_CASE("embedding kernel matches the reference", "[kernels][emulated]") {
  std::mt19937 rng(1);
  for (int N : {1, 7, 33})
    for (int C : {1, 37, 200}) {
      INFO("N = " << N << ", C = " << C);
      const int V = 50, P = 40;
      auto wte = random_floats(static_cast<std::size_t>(V) * C, rng);
      auto wpe = random_floats(static_cast<std::size_t>(P) * C, rng);
      std::vector<int32_t> tok(N), pos(N);
      for (int i = 0; i < N; i++) tok[i] = (i * 13 + 5) % V, pos[i] = (i * 7) % P;
      auto got = poisoned(static_cast<std::size_t>(N) * C), want = got;
      kn::embedding({on(got), on(tok), on(pos), on(wte), on(wpe), N, C});
      sk::kernels::ref::embedding(want.data(), tok.data(), pos.data(), wte.data(), wpe.data(), N,
                                  C);
      require_close(got, want, 0.f, 0.f);  // one fp32 add on both sides
    }
}

TEST_CASE("layernorm kernel matches the reference", "[kernels][emulated]") {
  std::mt19937 rng(2);
  for (int N : {1, 5, 33})
    for (int C : {1, 31, 64, 300, 2100}) {  // 2100: past the registers (kLayernormPerLane)
      INFO("N = " << N << ", C = " << C);
      auto x = random_floats(static_cast<std::size_t>(N) * C, rng, -3.f, 5.f);
      auto w = random_floats(C, rng), b = random_floats(C, rng);
      auto got = poisoned(x.size()), want = got;
      kn::layernorm({on(got), on(x), on(w), on(b), N, C, 1e-5f});
      sk::kernels::ref::layernorm(want.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
      require_close(got, want);
    }
}

TEST_CASE("lm_head kernel matches the reference", "[kernels][emulated]") {
  std::mt19937 rng(3);
  for (int M : {1, 5, 9, 33})
    for (int V : {1, 37, 517})
      for (int C : {13, 64, 300}) {
        INFO("M = " << M << ", V = " << V << ", C = " << C);
        auto x = random_floats(static_cast<std::size_t>(M) * C, rng);
        auto wte = random_floats(static_cast<std::size_t>(V) * C, rng);
        auto got = poisoned(static_cast<std::size_t>(M) * V), want = got;
        kn::lm_head({on(got), on(x), on(wte), M, V, C});
        sk::kernels::ref::lm_head(want.data(), x.data(), wte.data(), M, V, C);
        // A dot product of C terms each <= 1: the summation order moves it by ~C ulp(1).
        require_close(got, want, 1e-5f * std::sqrt(static_cast<float>(C)), 1e-5f);
      }
}

TEST_CASE("argmax kernel picks serve::argmax's token, ties to the lowest index",
          "[kernels][emulated]") {
  std::mt19937 rng(4);
  for (int M : {1, 3, 33})
    for (int V : {1, 31, 257, 1000}) {
      INFO("M = " << M << ", V = " << V);
      auto logits = random_floats(static_cast<std::size_t>(M) * V, rng);
      // Ties: row 0's maximum appears twice; row 1 has a NaN that must not win.
      if (V > 10) {
        const auto mx = *std::max_element(logits.begin(), logits.begin() + V);
        logits[3] = logits[V - 2] = mx + 1.f;
        if (M > 1) logits[V + 5] = std::numeric_limits<float>::quiet_NaN();
      }
      std::vector<int32_t> ids(M, -1);
      kn::argmax({on(ids), on(logits), M, V});
      for (int m = 0; m < M; m++) {
        std::span<const float> row(logits.data() + static_cast<std::size_t>(m) * V, V);
        // serve::argmax is std::max_element, which a NaN confuses: compare on NaN-free rows.
        if (std::any_of(row.begin(), row.end(), [](float v) { return std::isnan(v); })) {
          CHECK(ids[m] != 5);
          continue;
        }
        CHECK(ids[m] == sk::serve::argmax(row));
      }
    }
}

template <class T>
void check_kv_append_contiguous(int C) {
  INFO("C = " << C);
  std::mt19937 rng(5);
  const int slots = 3, max_len = 20, N = 9;
  const std::size_t cache = static_cast<std::size_t>(slots) * max_len * C;
  auto qkv = random_floats(static_cast<std::size_t>(N) * 3 * C, rng);
  std::vector<int32_t> slot(N), row(N);
  for (int r = 0; r < N; r++) slot[r] = r % slots, row[r] = 2 + r;
  std::vector<T> k1(cache), v1(cache), k2(cache), v2(cache);
  // The host's conversions (kernels::store_f32 / to_f32 are device functions under nvcc).
  namespace ref = sk::kernels::ref;
  // Poison: untouched rows must stay so, touched rows must be written.
  for (auto* a : {&k1, &v1, &k2, &v2})
    for (auto& e : *a) ref::store_from_f32(e, std::numeric_limits<float>::quiet_NaN());
  const int64_t stride = static_cast<int64_t>(max_len) * C;
  kn::kv_append(
      kn::KvAppendParams{kn::device_view(sk::kv::ContiguousView<T>{on(k1), on(v1), stride, C}),
                         on(qkv), on(slot), on(row), N, C});
  sk::kernels::ref::kv_append(sk::kv::ContiguousView<T>{k2.data(), v2.data(), stride, C},
                              qkv.data(), slot.data(), row.data(), N, C);
  for (std::size_t i = 0; i < cache; i++) {
    const float a = ref::load_f32(k1[i]), b = ref::load_f32(k2[i]);
    const float c = ref::load_f32(v1[i]), d = ref::load_f32(v2[i]);
    if (std::isnan(b)) {
      REQUIRE(std::isnan(a));
      REQUIRE(std::isnan(c));
    } else {
      REQUIRE(a == b);
      REQUIRE(c == d);
    }
  }
}

TEST_CASE("kv_append kernel writes the reference's cache rows", "[kernels][emulated]") {
  SECTION("f32") {
    for (int C : {48, 2100}) check_kv_append_contiguous<float>(C);  // 2100: past the registers
  }
  SECTION("f16") {
    for (int C : {48, 2100}) check_kv_append_contiguous<sk::half_t>(C);
  }
}

TEST_CASE("kernel launchers name the shape they cannot run", "[kernels][emulated][errors]") {
  float f = 0.f;
  int32_t i = 0;
  REQUIRE_THROWS_WITH(kn::embedding({&f, &i, &i, &f, &f, 0, 4}),
                      Catch::Contains("kernels::embedding") && Catch::Contains("N = 0"));
  REQUIRE_THROWS_WITH(kn::layernorm({&f, &f, &f, &f, 3, 0, 1e-5f}),
                      Catch::Contains("kernels::layernorm") && Catch::Contains("C = 0"));
  REQUIRE_THROWS_WITH(kn::lm_head({&f, &f, &f, 2, 0, 8}),
                      Catch::Contains("kernels::lm_head") && Catch::Contains("V = 0"));
  REQUIRE_THROWS_WITH(kn::argmax({&i, &f, 0, 8}),
                      Catch::Contains("kernels::argmax") && Catch::Contains("M = 0"));
}
