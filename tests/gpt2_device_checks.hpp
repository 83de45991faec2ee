// SPDX-License-Identifier: Apache-2.0
// The whole tiny GPT-2 with every array in device storage (backend/device_storage.hpp):
// weights::DeviceMatrix weights, device scratch, device KV caches and block tables, per-step
// uploads and the logits download. The including file names the backend, `DeviceBackend`:
// backend::Cuda under nvcc (test_gpt2_cuda, on a GPU), or the emulator over device storage
// under the host compiler (test_gpt2_device_storage). The assertions are those of
// test_kernels_gpt2: HF logits and greedy tokens for fp32 weights, contiguous and paged; the
// ragged batch; 16-bit weights against the host backend with the same format.
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "servekit/model/footprint.hpp"
#include "servekit/lora/adapter.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/sampling.hpp"
#include "support/hf_checks.hpp"
#include "support/rounding_ratio.hpp"

namespace sk = servekit;
using sk::model::Logits;
using sk::model::SeqStep;

namespace {
constexpr float kTol = 1e-4f;  // fp32 weights and compute; only summation order differs

using servekit::test::fixture_dir;

template <class D, class W = sk::weights::F32, class K = sk::kv::Contiguous>
using Device = sk::Config<D, W, K, sk::lora::None, DeviceBackend>;

static_assert(!sk::Gpt2<Device<sk::dims::TinyA>>::Storage::is_host,
              "these checks are for a backend with device storage");
}  // namespace

TEMPLATE_TEST_CASE("device-resident gpt2 matches HF logits and greedy tokens", "[device][hf]",
                   (Device<sk::dims::TinyA>),
                   (Device<sk::dims::TinyB, sk::weights::F32, sk::kv::Paged<4>>)) {
  using Cfg = TestType;
  using D = typename Cfg::Dims;
  auto model = sk::Gpt2<Cfg>::load(fixture_dir<D>());
  const auto ref = sk::test::load_reference(fixture_dir<D>());
  REQUIRE(ref.cases.size() >= 6);
  // One cache for every case, its slot released in between: a paged cache hands the next
  // case its blocks in another order, so a stale device block table would read wrong rows.
  auto cache = model.make_cache(1);
  for (const auto& c : ref.cases) {
    INFO("case " << c.name << " (" << c.prompt_ids.size() << " prompt tokens)");
    const int slot = cache.acquire();
    sk::test::check_hf_case(model, cache, slot, c, ref.n_steps, kTol);
    cache.release(slot);
  }
}

TEMPLATE_TEST_CASE("device-resident gpt2 gives each sequence of a ragged batch HF's logits",
                   "[device][hf][batch]", (Device<sk::dims::TinyA>),
                   (Device<sk::dims::TinyA, sk::weights::F32, sk::kv::Paged<4>>)) {
  using Cfg = TestType;
  using D = typename Cfg::Dims;
  constexpr int V = D::vocab;
  auto model = sk::Gpt2<Cfg>::load(fixture_dir<D>());
  const auto ref = sk::test::load_reference(fixture_dir<D>());
  const auto& b = ref.batch;
  const int B = static_cast<int>(b.prompt_ids.size());
  auto cache = model.make_cache(B);
  const auto [tokens, seqs] = sk::test::ragged_prefill(b);
  // Last first (the row gather on the device), then All over a fresh cache.
  std::vector<float> logits;
  model.forward(cache, {tokens, seqs, Logits::Last}, logits);
  REQUIRE(logits.size() == static_cast<std::size_t>(B) * V);
  for (int i = 0; i < B; i++) {
    INFO("sequence " << i << " last prompt position");  // left-padded: the last padded row
    auto want =
        std::span(b.logits).subspan((static_cast<std::size_t>(i) * b.t_pad + b.t_pad - 1) * V, V);
    CHECK(sk::test::max_abs_diff(sk::test::logit_row(logits, i, V), want) <= kTol);
  }
  cache = model.make_cache(B);
  sk::test::check_hf_batch(model, cache, b, kTol);
}

TEMPLATE_TEST_CASE("device-resident 16-bit weights match the host backend with the same format",
                   "[device][weights]", sk::kv::Contiguous, sk::kv::Paged<16>) {
  using D = sk::dims::TinyA;
  using W = sk::weights::F16;
  auto host = sk::Gpt2<sk::Config<D, W>>::load(fixture_dir<D>());
  auto dev = sk::Gpt2<Device<D, W, TestType>>::load(fixture_dir<D>());
  const auto ref = sk::test::load_reference(fixture_dir<D>());
  // The same weights on both sides and the same footprint report.
  CHECK(dev.weight_bytes() == host.weight_bytes());
  CHECK(sk::footprint(dev).weights() == sk::footprint(host).weights());
  // As in test_kernels_gpt2: the device path also rounds each linear layer's input to fp16
  // (unit roundoff u = 2^-11), four linears per layer and the head.
  constexpr float u = 1.f / 2048;
  float worst = 0.f, scale = 0.f;
  sk::test::side_by_side(host, dev, ref, [&](const auto& hl, const auto& dl) {
    worst = std::max(worst, sk::test::max_abs_diff(dl, hl));
    for (float v : hl) scale = std::max(scale, std::abs(v));
  });
  INFO("max |device - host| = " << worst << ", max |logit| = " << scale);
  CHECK(worst > 0.f);  // the activations really were rounded: this is not the host path
  CHECK(worst <= (4 * D::n_layer + 1) * u * scale);
}

TEMPLATE_TEST_CASE("device-resident uint8 zero-point weights match the host backend",
                   "[device][weights]", sk::weights::U8ZeroPoint<sk::weights::PerChannel>,
                   sk::weights::U8ZeroPoint<sk::weights::Group<32>>) {
  using D = sk::dims::TinyA;
  using W = TestType;
  auto host = sk::Gpt2<sk::Config<D, W>>::load(fixture_dir<D>());
  auto dev = sk::Gpt2<Device<D, W, sk::kv::Paged<16>>>::load(fixture_dir<D>());
  const auto ref = sk::test::load_reference(fixture_dir<D>());
  CHECK(dev.weight_bytes() == host.weight_bytes());
  // The same quantized weights and the same factorised sums on both sides, summed in another
  // order: fp32 reordering, grown by how much larger |q scale| + |min| is than |w'|.
  const float tol = static_cast<float>(
      kTol * sk::test::rounding_ratio<W>(sk::model::load_gpt2<D>(fixture_dir<D>()), D::n_embd));
  constexpr int V = D::vocab;
  sk::test::side_by_side(host, dev, ref, [&](const auto& hl, const auto& dl) {
    CHECK(sk::test::max_abs_diff(dl, hl) <= tol);
    // Same greedy token wherever the host's top-2 margin leaves room for the tolerance.
    for (std::size_t r = 0; r < hl.size() / V; r++) {
      auto h = sk::test::logit_row(hl, static_cast<int>(r), V);
      const int32_t best = sk::serve::argmax(h);
      float second = -INFINITY;
      for (int v = 0; v < V; v++)
        if (v != best) second = std::max(second, h[v]);
      if (h[best] - second > 2 * tol)
        CHECK(sk::serve::argmax(sk::test::logit_row(dl, static_cast<int>(r), V)) == best);
    }
  });
}

TEMPLATE_TEST_CASE("device-resident unmerged adapters give HF + PEFT's logits",
                   "[device][lora][hf]", sk::lora::Loop, sk::lora::Gathered, sk::lora::Segmented) {
  using D = sk::dims::TinyA;
  using Cfg = sk::Config<D, sk::weights::F32, sk::kv::Paged<16>, TestType, DeviceBackend>;
  auto model = sk::Gpt2<Cfg>::load(fixture_dir<D>());
  const char* const fixtures[] = {"r4", "r8", "r16"};
  for (const char* f : fixtures)
    model.add_adapter(sk::lora::load_adapter<D>(fixture_dir<D>() / "lora" / f));
  // A slot freed and filled again: the device copies and tables follow.
  model.remove_adapter(1);
  CHECK(model.add_adapter(sk::lora::load_adapter<D>(fixture_dir<D>() / "lora" / "r8")) == 1);
  for (int slot = 0; slot < 3; slot++) {
    const auto ref = sk::test::load_reference(fixture_dir<D>() / "lora" / fixtures[slot]);
    for (const auto& c : ref.cases) {
      INFO("adapter " << fixtures[slot] << " case " << c.name);
      auto cache = model.make_cache(1);
      sk::test::check_hf_case(model, cache, 0, c, ref.n_steps, kTol, slot);
    }
  }
}

// What a warm decode step asks of the device, counted by simt (simt/counters.hpp): the kernels
// it launches and the copies, synchronisations and allocations around them. On a GPU each of
// these costs microseconds; a step of GPT-2 small is ~100 us of memory traffic at H100 speed.
TEMPLATE_TEST_CASE("a warm decode step's launches, copies and allocations, counted",
                   "[device][budget]", sk::weights::F32,
                   sk::weights::U8ZeroPoint<sk::weights::PerChannel>) {
  using D = sk::dims::TinyA;
  constexpr int L = D::n_layer;
  auto model = sk::Gpt2<Device<D, TestType, sk::kv::Paged<16>>>::load(fixture_dir<D>());
  constexpr int S = 3;
  auto cache = model.make_cache(S);
  std::vector<int32_t> tokens;
  std::vector<SeqStep> seqs;
  for (int i = 0; i < S; i++) {
    seqs.push_back({i, 0, 4 + i});
    for (int j = 0; j < 4 + i; j++) tokens.push_back(static_cast<int32_t>(7 * i + j));
  }
  std::vector<sk::kernels::RowSampling> rows(S);
  std::vector<int32_t> ids(S);
  std::vector<float> lp(S);
  auto step = [&] {
    model.forward_pick(cache, {tokens, seqs}, rows, ids, lp);
    tokens.assign(ids.begin(), ids.end());
    for (auto& s : seqs) s = {s.slot, s.n_past + s.n_new, 1};
  };
  step();  // prefill
  step();  // the first decode step sizes the decode buffers
  const sk::simt::Counts before = sk::simt::counts();
  sk::simt::LaunchLog log;
  step();
  const sk::simt::Counts c = sk::simt::counts() - before;
  const auto launches = log.take();
  std::string names;
  for (const auto& r : launches) names += r.kernel + " (" + std::to_string(r.blocks()) + ")\n";
  INFO("launches:\n" << names);
  INFO("h2d " << c.h2d << " (" << c.h2d_bytes << " B), d2h " << c.d2h << " (" << c.d2h_bytes
              << " B), syncs " << c.syncs << ", allocs " << c.allocs);
  // Nothing is allocated or freed once the buffers have grown to the step's shape.
  CHECK(c.allocs == 0);
  CHECK(c.frees == 0);
  // Only the picked ids and their logprobs come back, not (S, V) logits.
  CHECK(c.d2h == 2);
  CHECK(c.d2h_bytes == S * (sizeof(int32_t) + sizeof(float)));
  // Two uploads: the step's index arrays, and the rows' sampling parameters. Both are
  // null-stream copies, which wait for the device, as the downloads do: 4 host waits where one
  // would do (the plan/run split of the CUDA step issue).
  CHECK(c.h2d == 2);
  CHECK(c.syncs == c.h2d + c.d2h);
  CHECK(static_cast<long long>(launches.size()) == c.launches);
  // Per layer: ln_1, c_attn, kv_append, attention, c_proj, ln_2, c_fc, mlp c_proj; then the
  // embedding, the last-row gather, ln_f, the head and the sampler.
  CHECK(c.launches == 8 * L + 5);
  const std::string name = decltype(model)::name();
  WARN("warm decode step of " << S << " rows, " << name << ": " << c.launches << " launches, "
                              << c.h2d << " uploads (" << c.h2d_bytes << " B), " << c.d2h
                              << " downloads, " << c.syncs << " host syncs, " << c.allocs
                              << " allocations");
}
