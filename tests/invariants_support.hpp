// SPDX-License-Identifier: Apache-2.0
#pragma once
// The serving invariants every composition (weight format x cache layout x backend) must keep
// on the HF fixtures, shared by the test_invariants_* executables:
//   1. each sequence of a ragged batch of HF's 3 batch prompts (7, 5, 4 tokens) gets exactly
//      the greedy tokens it gets alone, with the same composition;
//   2. f32/f16/bf16 weights: HF's logits and greedy tokens (HF's batch reference), within the
//      format's tolerance;
//   3. Emulated: the host backend's logits and greedy tokens, same format and layout.
// A greedy token may differ from the one compared against only where that side's top-2 margin
// is within twice the logit tolerance (then a shift inside the tolerance can swap the two);
// the comparison of that sequence stops there, since the two continue from different tokens.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "servekit/backend/host.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/sampling.hpp"
#include "servekit/weights/formats.hpp"
#include "support/reference.hpp"
#include "support/rounding_ratio.hpp"

namespace servekit::test::inv {

constexpr float kTol = 1e-4f;  // fp32 on both sides; only summation order differs

// One composition under test, and the same one on the host backend.
template <class D, class W, class K, class B>
struct Inv {
  using Dims = D;
  using Fmt = W;
  using Kv = K;
  using Backend = B;
  using Model = Gpt2<Config<D, W, K, lora::None, B>>;
  using HostModel = Gpt2<Config<D, W, K, lora::None, backend::Host>>;
};

// One sequence's run: the logits at every prompt position, then the logits each greedy token
// was taken from (the last prompt position, then one row per decode step) and the tokens.
struct SeqTrace {
  std::vector<float> prefill;            // (T, V)
  std::vector<std::vector<float>> next;  // (n + 1) rows of (V)
  std::vector<int32_t> tokens;           // (n + 1)
};

// Prompts in one ragged prefill (slot i each), then n greedy decode steps of all together.
template <class Model>
std::vector<SeqTrace> run_batch(Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                int n) {
  constexpr int V = Model::V;
  const int B = static_cast<int>(prompts.size());
  auto cache = model.make_cache(B);
  std::vector<int32_t> tokens;
  std::vector<model::SeqStep> seqs;
  for (int i = 0; i < B; i++) {
    seqs.push_back({i, 0, static_cast<int32_t>(prompts[i].size())});
    tokens.insert(tokens.end(), prompts[i].begin(), prompts[i].end());
  }
  std::vector<float> logits;
  model.forward(cache, {tokens, seqs, model::Logits::All}, logits);
  std::vector<SeqTrace> out(B);
  std::size_t r = 0;
  for (int i = 0; i < B; i++) {
    const std::size_t T = prompts[i].size();
    out[i].prefill.assign(logits.begin() + r * V, logits.begin() + (r + T) * V);
    out[i].next.emplace_back(out[i].prefill.end() - V, out[i].prefill.end());
    r += T;
  }
  for (int step = 0; step <= n; step++) {
    tokens.clear();
    for (int i = 0; i < B; i++) {
      out[i].tokens.push_back(serve::argmax(out[i].next.back()));
      tokens.push_back(out[i].tokens.back());
      seqs[i] = {i, seqs[i].n_past + seqs[i].n_new, 1};
    }
    if (step == n) break;
    model.forward(cache, {tokens, seqs, model::Logits::Last}, logits);
    for (int i = 0; i < B; i++)
      out[i].next.emplace_back(logits.begin() + static_cast<std::ptrdiff_t>(i) * V,
                               logits.begin() + static_cast<std::ptrdiff_t>(i + 1) * V);
  }
  return out;
}

// HF's batch reference as traces: its prefill logits at the real (unpadded) positions, its
// greedy ids and the step logits they came from; the first n steps.
inline std::vector<SeqTrace> hf_traces(const RefBatch& b, int V, int n) {
  std::vector<SeqTrace> out;
  for (std::size_t i = 0; i < b.prompt_ids.size(); i++) {
    const std::size_t T = b.prompt_ids[i].size(), pad = b.t_pad - T;
    SeqTrace t;
    const auto first = b.logits.begin() + (i * b.t_pad + pad) * V;
    t.prefill.assign(first, first + T * V);
    t.next.emplace_back(t.prefill.end() - V, t.prefill.end());
    for (int s = 0; s < n; s++) {
      const auto row = b.step_logits.begin() + (i * b.n_steps + s) * V;
      t.next.emplace_back(row, row + V);
    }
    t.tokens.assign(b.greedy_ids[i].begin(), b.greedy_ids[i].begin() + n + 1);
    out.push_back(std::move(t));
  }
  return out;
}

// Top-1 minus top-2 logit.
inline float top2_margin(std::span<const float> v) {
  float a = -INFINITY, b = -INFINITY;
  for (float x : v)
    if (x > a)
      b = a, a = x;
    else if (x > b)
      b = x;
  return a - b;
}

struct Compared {
  float worst = 0.f;  // max |logit difference| over the compared rows
  int steps = 0;      // greedy tokens compared
  int diverged = 0;   // sequences whose tokens parted where the margin allowed it
};

// got against want, row by row along the shared token path (see the header comment).
inline Compared compare(const std::vector<SeqTrace>& got, const std::vector<SeqTrace>& want,
                        float tol) {
  REQUIRE(got.size() == want.size());
  Compared c;
  for (std::size_t i = 0; i < got.size(); i++) {
    INFO("sequence " << i);
    REQUIRE(got[i].prefill.size() == want[i].prefill.size());
    const float d0 = max_abs_diff(got[i].prefill, want[i].prefill);
    CHECK(d0 <= tol);
    c.worst = std::max(c.worst, d0);
    for (std::size_t s = 0; s < want[i].tokens.size(); s++) {
      INFO("greedy token " << s);
      const float d = max_abs_diff(got[i].next[s], want[i].next[s]);
      CHECK(d <= tol);
      c.worst = std::max(c.worst, d);
      c.steps++;
      if (got[i].tokens[s] != want[i].tokens[s]) {
        CHECK(top2_margin(want[i].next[s]) <= 2 * tol);
        c.diverged++;
        break;
      }
    }
  }
  return c;
}

// Logit tolerances of one composition; scale is max |logit| (HF's batch reference).
//  - order: kTol x the format's rounding ratio: the same arithmetic summed in another order.
//  - xround: the device's tensor-core linear rounds its input x to the weights' 16-bit type
//    (unit roundoff u_w: 2^-11 fp16, 2^-8 bf16). Four linears per layer and the head (a
//    linear in the format too), each off by at most u_w relative, move the logits by at most
//    ~(4 L + 1) u_w scale (tests/test_kernels_gpt2.cpp).
//  - kv: an f16 cache rounds every key and value (u = 2^-11); two rounded operands per layer
//    move the logits by at most ~2 L u scale against an fp32 cache, by the same argument. An
//    int8 cache rounds each to half a step of its head's scale, max |x| / 127: 2^-8 of the
//    head's largest feature, which is up to 4x its typical one in these heads of 16-64
//    features, so u = 2^-6 relative to an operand's own size.
//  - weights (HF only): the 16-bit weights themselves, (4 L + 1) u_w scale (tests/
//    test_weights_hf.cpp); tiny-b's weights are bf16 already, so bf16 rounds nothing there.
//  - w8a8 (HF only): W8A8 rounds both operands of every linear to half a step of their
//    group's scale, max |v| / 127 over a weight column or an activation row: 2^-8 of its
//    largest element, up to 4x a typical one, so u = 2^-6 relative per operand (as the int8
//    cache's argument). Two rounded operands in each of the 4 L + 1 linears:
//    2 (4 L + 1) 2^-6 scale. Its integer sums are exact, so batch against alone needs no more.
template <class F>
constexpr bool is_w8a8 = weights::Traits<F>::family == weights::LinearFamily::Int8;

template <class I>
struct Tolerances {
  float order, xround, kv, weights, w8a8;

  Tolerances(const model::Gpt2Tensors& t, float scale) {
    using F = typename I::Fmt;
    constexpr int L = I::Dims::n_layer;
    constexpr bool k16 = std::is_same_v<F, weights::F16> || std::is_same_v<F, weights::BF16>;
    const float uw = std::is_same_v<F, weights::BF16> ? 0x1p-8f : 0x1p-11f;
    order = static_cast<float>(kTol * rounding_ratio<F>(t, I::Dims::n_embd));
    xround =
        k16 && !std::is_same_v<typename I::Backend, backend::Host> ? (4 * L + 1) * uw * scale : 0;
    kv = std::is_same_v<typename I::Kv::Elem, kv::F16>  ? 2 * L * 0x1p-11f * scale
         : std::is_same_v<typename I::Kv::Elem, kv::I8> ? 2 * L * 0x1p-6f * scale
                                                        : 0;
    const bool exact =
        std::is_same_v<F, weights::BF16> && std::is_same_v<typename I::Dims, dims::TinyB>;
    weights = k16 && !exact ? (4 * L + 1) * uw * scale : 0;
    w8a8 = is_w8a8<F> ? 2 * (4 * L + 1) * 0x1p-6f * scale : 0;
  }
  // Batch against alone, same composition: each side within xround and kv of the computation
  // with exact x and an fp32 cache, plus the reordering.
  float batch() const { return order + 2 * xround + 2 * kv; }
  // Against HF: this side's roundings; HF is fp32 throughout.
  float hf() const { return kTol + weights + w8a8 + xround + kv; }
  // Emulated against the host with the same composition: the host rounds no x; both round
  // their caches.
  float host() const { return order + xround + 2 * kv; }
};

template <class F>
constexpr bool compares_with_hf =
    std::is_same_v<F, weights::F32> || std::is_same_v<F, weights::F16> ||
    std::is_same_v<F, weights::BF16> || is_w8a8<F>;

// All the invariants of composition I, with n decode steps after the prefill.
template <class I>
void check_invariants(int n) {
  using D = typename I::Dims;
  using Model = typename I::Model;
  constexpr int V = D::vocab;
  INFO(Model::name() << ", " << n << " decode steps");
  auto model = Model::load(fixture_dir<D>());
  const auto ref = load_reference(fixture_dir<D>());
  const auto& prompts = ref.batch.prompt_ids;
  REQUIRE(prompts.size() == 3);
  REQUIRE(n <= ref.batch.n_steps);
  float scale = 0.f;
  for (float v : ref.batch.logits) scale = std::max(scale, std::abs(v));
  const Tolerances<I> tol(model::load_gpt2<D>(fixture_dir<D>()), scale);

  const auto batch = run_batch(model, prompts, n);

  // 1. Alone, tokens exactly; logits within the reordering (and rounding-flip) tolerance.
  float worst_alone = 0.f;
  for (std::size_t i = 0; i < prompts.size(); i++) {
    INFO("sequence " << i << " alone (" << prompts[i].size() << " prompt tokens)");
    const auto alone = run_batch(model, {prompts[i]}, n);
    CHECK(batch[i].tokens == alone[0].tokens);
    worst_alone = std::max(worst_alone, max_abs_diff(batch[i].prefill, alone[0].prefill));
    for (std::size_t s = 0; s < alone[0].next.size(); s++)
      worst_alone = std::max(worst_alone, max_abs_diff(batch[i].next[s], alone[0].next[s]));
  }
  CHECK(worst_alone <= tol.batch());
  WARN(Model::name() << ": batch vs alone max |dlogit| " << worst_alone << " (tol " << tol.batch()
                     << ")");

  // 2. HF.
  if constexpr (compares_with_hf<typename I::Fmt>) {
    INFO("against HF's batch reference, tolerance " << tol.hf());
    const auto c = compare(batch, hf_traces(ref.batch, V, n), tol.hf());
    WARN(Model::name() << ": vs HF max |dlogit| " << c.worst << " (tol " << tol.hf() << "), "
                       << c.steps << " greedy tokens compared, " << c.diverged
                       << " sequences parted at a near tie");
  }

  // 3. Emulated against the host.
  if constexpr (!std::is_same_v<typename I::Backend, backend::Host>) {
    INFO("against the host backend, tolerance " << tol.host());
    auto host = I::HostModel::load(fixture_dir<D>());
    const auto c = compare(batch, run_batch(host, prompts, n), tol.host());
    WARN(Model::name() << ": vs host max |dlogit| " << c.worst << " (tol " << tol.host() << "), "
                       << c.steps << " greedy tokens compared");
  }
}

}  // namespace servekit::test::inv
