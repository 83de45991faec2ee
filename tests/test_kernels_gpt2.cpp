// SPDX-License-Identifier: Apache-2.0
// The whole tiny GPT-2 on the Emulated backend (the CUDA kernels run by the emulator) against
// the Hugging Face fixtures: logits at every prompt position and at each cached decode step,
// greedy tokens, and the left-padded ragged batch; then 16-bit weights against the host backend
// with the same weight format.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>

#include "servekit/backend/emulated.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/sampling.hpp"
#include "support/hf_checks.hpp"

namespace sk = servekit;
using sk::model::Batch;
using sk::model::Logits;
using sk::model::SeqStep;

namespace {
constexpr float kTol = 1e-4f;  // fp32 weights and compute; only summation order differs

using servekit::test::fixture_dir;

template <class D, class W = sk::weights::F32, class K = sk::kv::Contiguous>
using Emulated = sk::Config<D, W, K, sk::lora::None, sk::backend::Emulated>;
}  // namespace

TEMPLATE_TEST_CASE("emulated gpt2 matches HF logits and greedy tokens", "[emulated][hf]",
                   (Emulated<sk::dims::TinyA>), (Emulated<sk::dims::TinyB>),
                   (Emulated<sk::dims::TinyA, sk::weights::F32, sk::kv::Paged<16>>)) {
  using Cfg = TestType;
  using D = typename Cfg::Dims;
  auto model = sk::Gpt2<Cfg>::load(fixture_dir<D>());
  const auto ref = sk::test::load_reference(fixture_dir<D>());
  REQUIRE(ref.cases.size() >= 6);
  for (const auto& c : ref.cases) {
    INFO("case " << c.name << " (" << c.prompt_ids.size() << " prompt tokens)");
    auto cache = model.make_cache(1);
    sk::test::check_hf_case(model, cache, 0, c, ref.n_steps, kTol);
  }
}

TEMPLATE_TEST_CASE("emulated gpt2 gives each sequence of a ragged batch HF's logits",
                   "[emulated][hf][batch]", (Emulated<sk::dims::TinyA>),
                   (Emulated<sk::dims::TinyB>)) {
  using Cfg = TestType;
  using D = typename Cfg::Dims;
  auto model = sk::Gpt2<Cfg>::load(fixture_dir<D>());
  const auto ref = sk::test::load_reference(fixture_dir<D>());
  const auto& b = ref.batch;
  const int B = static_cast<int>(b.prompt_ids.size());
  auto cache = model.make_cache(B);
  sk::test::check_hf_batch(model, cache, b, kTol);
}

TEMPLATE_TEST_CASE("emulated 16-bit weights match the host backend with the same format",
                   "[emulated][weights]", sk::weights::F16, sk::weights::BF16) {
  using D = sk::dims::TinyA;
  using HostCfg = sk::Config<D, TestType>;
  auto host = sk::Gpt2<HostCfg>::load(fixture_dir<D>());
  auto emu = sk::Gpt2<Emulated<D, TestType>>::load(fixture_dir<D>());
  const auto ref = sk::test::load_reference(fixture_dir<D>());
  // Both sides hold the same 16-bit weights; the device path also rounds each linear layer's
  // input to the weights' type (unit roundoff u: 2^-11 fp16, 2^-8 bf16). Four linears per
  // layer and the head (a linear in the format), each off by at most u relative, moving logits
  // by at most ~(4 L + 1) u max|logit| if the
  // network passes relative errors through with unit gain (layernorm renormalises, GELU and
  // the residual sums do not amplify them).
  constexpr float u = std::is_same_v<TestType, sk::weights::BF16> ? 1.f / 256 : 1.f / 2048;
  float worst = 0.f, scale = 0.f;
  for (const auto& c : ref.cases) {
    INFO("case " << c.name);
    const int T = static_cast<int>(c.prompt_ids.size());
    auto hc = host.make_cache(1);
    auto ec = emu.make_cache(1);
    std::vector<float> hl, el;
    SeqStep s{0, 0, T};
    host.forward(hc, {c.prompt_ids, std::span(&s, 1), Logits::All}, hl);
    emu.forward(ec, {c.prompt_ids, std::span(&s, 1), Logits::All}, el);
    worst = std::max(worst, sk::test::max_abs_diff(el, hl));
    for (float v : hl) scale = std::max(scale, std::abs(v));
    int n_past = T;
    for (int step = 0; step < ref.n_steps; step++) {
      int32_t next = c.greedy_ids[step];
      SeqStep d{0, n_past++, 1};
      host.forward(hc, {std::span(&next, 1), std::span(&d, 1), Logits::Last}, hl);
      emu.forward(ec, {std::span(&next, 1), std::span(&d, 1), Logits::Last}, el);
      worst = std::max(worst, sk::test::max_abs_diff(el, hl));
    }
  }
  INFO(TestType::name << ": max |emulated - host| = " << worst << ", max |logit| = " << scale);
  CHECK(worst > 0.f);  // the activations really were rounded: this is not the host path
  CHECK(worst <= (4 * D::n_layer + 1) * u * scale);
}

// Not a test: prints the emulated and host speed of a TinyA prefill of 64 tokens and of one
// decode step (best of 5 after a warm-up). Run it by its tag: test_kernels_gpt2 "[.throughput]".
TEST_CASE("emulated vs host throughput of tiny-a", "[.throughput]") {
  using D = sk::dims::TinyA;
  auto run = [](auto& model, const char* name) {
    auto cache = model.make_cache(1);
    std::vector<int32_t> prompt(64);
    for (int i = 0; i < 64; i++) prompt[i] = (i * 37 + 11) % D::vocab;
    std::vector<float> logits;
    auto time_ms = [](auto&& f) {
      double best = 1e30;
      for (int rep = 0; rep < 6; rep++) {  // the first is the warm-up
        const auto t0 = std::chrono::steady_clock::now();
        f();
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
        if (rep > 0) best = std::min(best, ms);
      }
      return best;
    };
    const double prefill = time_ms([&] {
      SeqStep s{0, 0, 64};
      model.forward(cache, {prompt, std::span(&s, 1), Logits::Last}, logits);
    });
    const double decode = time_ms([&] {
      int32_t next = 5;
      SeqStep d{0, 64, 1};
      model.forward(cache, {std::span(&next, 1), std::span(&d, 1), Logits::Last}, logits);
    });
    std::printf(
        "%-9s prefill 64 tokens: %8.3f ms (%9.0f tokens/s)   decode step (65th token): "
        "%8.3f ms (%8.0f tokens/s)\n",
        name, prefill, 64e3 / prefill, decode, 1e3 / decode);
  };
  auto host = sk::Gpt2<sk::Config<D>>::load(fixture_dir<D>());
  auto emu = sk::Gpt2<Emulated<D>>::load(fixture_dir<D>());
  auto emu16 = sk::Gpt2<Emulated<D, sk::weights::F16>>::load(fixture_dir<D>());
  run(host, "host f32");
  run(emu, "emu f32");
  run(emu16, "emu f16");
}
