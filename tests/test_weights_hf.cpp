// SPDX-License-Identifier: Apache-2.0
// The decoder in every weight format on the HF fixtures:
//   - each format's fused kernels give the logits of the fp32 decoder run on that format's
//     dequantised weights (the format changes the weights, never the arithmetic);
//   - fp16/bf16 stay within their rounding's reach of HF's logits, and bf16 on tiny-b, whose
//     weights are bf16 already, is HF to fp32 tolerance;
//   - uint8 formats keep the serving invariants: a sequence gets the same greedy tokens in a
//     ragged batch as alone, and cached decode equals the no-cache recompute.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "servekit/model/footprint.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/sampling.hpp"
#include "servekit/weights/transposed.hpp"
#include "support/reference.hpp"
#include "support/rounding_ratio.hpp"

namespace sk = servekit;
namespace w = servekit::weights;
using sk::model::Batch;
using sk::model::Logits;
using sk::model::SeqStep;

namespace {
constexpr float kTol = 1e-4f;  // fp32 compute on both sides; only summation order differs

template <class D, class F>
struct Case {
  using Dims = D;
  using Fmt = F;
};

using servekit::test::fixture_dir;

std::span<const float> row(const std::vector<float>& m, int r, int V) {
  return std::span(m).subspan(static_cast<std::size_t>(r) * V, V);
}

// Replaces every linear weight by its value after a round trip through format F, and unties
// lm_head: the format's (C, V) copy of wte^T, round-tripped, while the input lookup keeps
// wte in fp32. The fp32 decoder on these tensors is what the F decoder must compute.
template <class F>
sk::model::Gpt2Tensors dequantised(sk::model::Gpt2Tensors t, int C) {
  auto rt = [](std::vector<float>& v, int K, int N) {
    auto m = w::Matrix<F>::from_f32(v, K, N);
    for (int k = 0; k < K; k++)
      for (int n = 0; n < N; n++) v[static_cast<std::size_t>(k) * N + n] = m.dequant(k, n);
  };
  for (auto& l : t.layers) {
    rt(l.attn_w, C, 3 * C), rt(l.attn_proj_w, C, C), rt(l.fc_w, C, 4 * C);
    rt(l.mlp_proj_w, 4 * C, C);
  }
  const int V = t.config.vocab_size;
  auto head = w::transposed(t.wte, V, C);  // (C, V)
  rt(head, C, V);
  t.lm_head = w::transposed(head, C, V);  // (V, C)
  return t;
}

// Prefill logits at every position, then teacher-forced decode steps on HF's greedy ids.
template <class Model>
std::vector<std::vector<float>> case_logits(Model& model, const sk::test::RefCase& c, int n_steps) {
  auto cache = model.make_cache(1);
  std::vector<std::vector<float>> out(1);
  SeqStep s{0, 0, static_cast<int32_t>(c.prompt_ids.size())};
  model.forward(cache, {c.prompt_ids, std::span(&s, 1), Logits::All}, out[0]);
  int n_past = s.n_new;
  for (int step = 0; step < n_steps; step++) {
    int32_t next = c.greedy_ids[step];
    SeqStep d{0, n_past++, 1};
    out.emplace_back();
    model.forward(cache, {std::span(&next, 1), std::span(&d, 1), Logits::Last}, out.back());
  }
  return out;
}

// The smallest top-1 minus top-2 logit gap over a case's greedy steps, as HF computed it.
std::vector<float> greedy_margins(const std::filesystem::path& dir) {
  std::ifstream in(dir / "reference.json");
  auto j = nlohmann::json::parse(in);
  std::vector<float> m;
  for (auto& c : j["cases"]) m.push_back(c["greedy_min_top2_margin"]);
  return m;
}

using servekit::test::rounding_ratio;

float max_abs(std::span<const float> v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::abs(x));
  return m;
}
}  // namespace

TEMPLATE_TEST_CASE("each format computes the fp32 decoder on its dequantised weights", "[hf]",
                   (Case<sk::dims::TinyA, w::F16>), (Case<sk::dims::TinyA, w::BF16>),
                   (Case<sk::dims::TinyA, w::U8ZeroPoint<w::PerTensor>>),
                   (Case<sk::dims::TinyA, w::U8ZeroPoint<w::PerChannel>>),
                   (Case<sk::dims::TinyA, w::U8ZeroPoint<w::Group<32>>>),
                   (Case<sk::dims::TinyB, w::F16>),
                   (Case<sk::dims::TinyB, w::U8ZeroPoint<w::PerChannel>>),
                   (Case<sk::dims::TinyB, w::U8ZeroPoint<w::Group<32>>>)) {
  using D = typename TestType::Dims;
  using F = typename TestType::Fmt;
  using Name = sk::Config<D, F>;
  constexpr int V = D::vocab;
  auto model = sk::Gpt2<sk::Config<D, F>>::load(fixture_dir<D>());
  const auto tensors = sk::model::load_gpt2<D>(fixture_dir<D>());
  const float tol = static_cast<float>(kTol * rounding_ratio<F>(tensors, D::n_embd));
  sk::Gpt2<sk::Config<D>> ref_model(dequantised<F>(tensors, D::n_embd));
  const auto ref = sk::test::load_reference(fixture_dir<D>());
  float worst = 0;
  for (const auto& c : ref.cases) {
    INFO("case " << c.name);
    auto got = case_logits(model, c, ref.n_steps);
    auto want = case_logits(ref_model, c, ref.n_steps);
    for (std::size_t i = 0; i < got.size(); i++) {
      worst = std::max(worst, sk::test::max_abs_diff(got[i], want[i]));
      CHECK(sk::test::max_abs_diff(got[i], want[i]) <= tol);
    }
    CHECK(sk::serve::argmax(row(got[0], static_cast<int>(c.prompt_ids.size()) - 1, V)) ==
          sk::serve::argmax(row(want[0], static_cast<int>(c.prompt_ids.size()) - 1, V)));
  }
  WARN(Name::name() << ": max |logit - fp32 on dequantised weights| = " << worst << " (tolerance "
                    << tol << ")");
}

TEMPLATE_TEST_CASE("fp16 and bf16 logits stay within their rounding's reach of HF", "[hf]",
                   (Case<sk::dims::TinyA, w::F16>), (Case<sk::dims::TinyA, w::BF16>),
                   (Case<sk::dims::TinyB, w::F16>), (Case<sk::dims::TinyB, w::BF16>)) {
  using D = typename TestType::Dims;
  using F = typename TestType::Fmt;
  using Name = sk::Config<D, F>;
  constexpr int V = D::vocab;
  auto model = sk::Gpt2<sk::Config<D, F>>::load(fixture_dir<D>());
  const auto ref = sk::test::load_reference(fixture_dir<D>());
  const auto margins = greedy_margins(fixture_dir<D>());
  // Tolerance. Rounding a weight to the format changes it by at most u |w| (u = 2^-11 for
  // fp16, 2^-8 for bf16, round to nearest). To first order a matmul's output moves by at most
  // u sum |x w|, a relative u of its magnitude, and the 4 L rounded matmuls add their moves
  // along the residual stream, then the rounded lm_head adds its own, so a logit moves by at
  // most about (4 L + 1) u times the scale of the logits (max |logit|). tiny-b's weights are
  // bf16 already: bf16 rounding is the identity and only the fp32 tolerance remains.
  const bool exact = std::is_same_v<F, w::BF16> && std::is_same_v<D, sk::dims::TinyB>;
  const float u = std::is_same_v<F, w::F16> ? 0x1p-11f : 0x1p-8f;
  float worst = 0, worst_ratio = 0;
  for (std::size_t ci = 0; ci < ref.cases.size(); ci++) {
    const auto& c = ref.cases[ci];
    INFO("case " << c.name);
    auto got = case_logits(model, c, ref.n_steps);
    const float scale = max_abs(c.prefill_logits);
    const float tol = exact ? kTol : (4 * D::n_layer + 1) * u * scale;
    const int T = static_cast<int>(c.prompt_ids.size());
    const float d0 = sk::test::max_abs_diff(got[0], c.prefill_logits);
    CHECK(d0 <= tol);
    float d = d0;
    for (int step = 0; step < ref.n_steps; step++) {
      const float ds = sk::test::max_abs_diff(got[step + 1], row(c.step_logits, step, V));
      CHECK(ds <= tol);
      d = std::max(d, ds);
    }
    worst = std::max(worst, d);
    worst_ratio = std::max(worst_ratio, d / (u * scale));
    // Greedy ids must be HF's wherever HF's top-2 gap exceeds twice the deviation allowed:
    // then no logit shift within tol can swap the top two.
    if (margins[ci] > 2 * tol) {
      CHECK(sk::serve::argmax(row(got[0], T - 1, V)) == c.greedy_ids[0]);
      for (int step = 0; step < ref.n_steps; step++)
        CHECK(sk::serve::argmax(got[step + 1]) == c.greedy_ids[step + 1]);
    }
  }
  WARN(Name::name() << ": max |logit - HF| = " << worst
                    << ", in units of u * max|logit|: " << worst_ratio);
}

TEMPLATE_TEST_CASE("uint8 formats: ragged batch == alone, cached decode == recompute", "[hf]",
                   w::U8ZeroPoint<w::PerTensor>, w::U8ZeroPoint<w::PerChannel>,
                   w::U8ZeroPoint<w::Group<32>>, w::U8ZeroPoint<w::Group<64>>) {
  using D = sk::dims::TinyA;
  constexpr int V = D::vocab;
  using Model = sk::Gpt2<sk::Config<D, TestType>>;
  auto model = Model::load(fixture_dir<D>());
  const auto ref = sk::test::load_reference(fixture_dir<D>());
  const auto& prompts = ref.batch.prompt_ids;
  const int B = static_cast<int>(prompts.size()), steps = 12;
  std::vector<float> logits;

  // Each prompt alone: greedy with the cache, and the same by recomputing without it.
  std::vector<std::vector<int32_t>> alone(B);
  for (int i = 0; i < B; i++) {
    INFO("prompt " << i);
    auto cache = model.make_cache(1);
    SeqStep s{0, 0, static_cast<int32_t>(prompts[i].size())};
    model.forward(cache, {prompts[i], std::span(&s, 1)}, logits);
    int32_t next = sk::serve::argmax(logits);
    std::vector<int32_t> seq = prompts[i];
    std::vector<float> recomputed;
    for (int step = 0; step < steps; step++) {
      alone[i].push_back(next);
      seq.push_back(next);
      SeqStep d{0, static_cast<int32_t>(seq.size()) - 1, 1};
      model.forward(cache, {std::span(&next, 1), std::span(&d, 1)}, logits);
      auto nc = model.make_cache(1);
      SeqStep full{0, 0, static_cast<int32_t>(seq.size())};
      model.forward(nc, {seq, std::span(&full, 1)}, recomputed);
      CHECK(sk::test::max_abs_diff(logits, recomputed) <= kTol);
      next = sk::serve::argmax(logits);
      CHECK(sk::serve::argmax(recomputed) == next);
    }
  }

  // All prompts in one ragged prefill, then decoded together.
  auto cache = model.make_cache(B);
  std::vector<int32_t> tokens;
  std::vector<SeqStep> seqs;
  for (int i = 0; i < B; i++) {
    seqs.push_back({i, 0, static_cast<int32_t>(prompts[i].size())});
    tokens.insert(tokens.end(), prompts[i].begin(), prompts[i].end());
  }
  model.forward(cache, {tokens, seqs}, logits);
  std::vector<std::vector<int32_t>> batched(B);
  for (int step = 0; step < steps; step++) {
    tokens.clear();
    for (int i = 0; i < B; i++) {
      tokens.push_back(sk::serve::argmax(row(logits, i, V)));
      batched[i].push_back(tokens.back());
      seqs[i] = {i, seqs[i].n_past + seqs[i].n_new, 1};
    }
    model.forward(cache, {tokens, seqs}, logits);
  }
  for (int i = 0; i < B; i++) {
    INFO("prompt " << i);
    CHECK(batched[i] == alone[i]);
  }
}

TEST_CASE("a group size that does not divide a matrix's K fails at load, naming the tensor") {
  using Bad = sk::Gpt2<sk::Config<sk::dims::TinyA, w::U8ZeroPoint<w::Group<128>>>>;
  REQUIRE_THROWS_WITH(Bad::load(fixture_dir<sk::dims::TinyA>()),
                      Catch::Contains("h.0.attn.c_attn.weight") && Catch::Contains("G = 128") &&
                          Catch::Contains("K = 64"));
}

TEMPLATE_TEST_CASE("the head is stored in the format, and the footprint and step bytes say so", "",
                   w::F32, w::F16, w::BF16, w::U8ZeroPoint<w::PerChannel>,
                   w::U8ZeroPoint<w::Group<32>>) {
  using D = sk::dims::TinyA;
  constexpr std::size_t V = D::vocab, C = D::n_embd, VC = V * C;
  const auto tensors = sk::model::load_gpt2<D>(fixture_dir<D>());
  sk::Gpt2<sk::Config<D, TestType>> model(tensors);
  sk::Gpt2<sk::Config<D>> f32(tensors);
  const auto fp = sk::footprint(model), fp32 = sk::footprint(f32);
  CHECK(fp.params == fp32.params);  // a copy of the tied head is no new parameter
  CHECK(fp.embeddings == fp32.embeddings);
  if constexpr (std::is_same_v<TestType, w::F32>) {
    CHECK(fp.lm_head == 4 * VC);  // the host backend's packed copy (Ops<Host>::kHeadCopy)
  } else if constexpr (std::is_same_v<TestType, w::U8ZeroPoint<w::PerChannel>>) {
    CHECK(fp.lm_head == VC);
    CHECK(model.head_state_bytes() == 2 * V * sizeof(float));  // (scale, min) per vocab row
  } else if constexpr (std::is_same_v<TestType, w::U8ZeroPoint<w::Group<32>>>) {
    CHECK(fp.lm_head == VC);
    CHECK(model.head_state_bytes() == 2 * (C / 32) * V * sizeof(float));
  } else {
    CHECK(fp.lm_head == 2 * VC);
  }
  CHECK(fp.weights() ==
        fp32.weights() - fp32.linear - fp32.lm_head + fp.linear + fp.lm_head + fp.quant_state);
  // A step reads the head in the format (and its state), not the fp32 wte.
  CHECK(model.weight_bytes() ==
        f32.weight_bytes() - fp32.lm_head - fp32.linear + fp.linear + fp.lm_head + fp.quant_state);
}

TEST_CASE("an untied fp32 head is a parameter of its own and gives its own logits") {
  using D = sk::dims::TinyA;
  constexpr std::size_t V = D::vocab, C = D::n_embd;
  auto tensors = sk::model::load_gpt2<D>(fixture_dir<D>());
  sk::Gpt2<sk::Config<D>> tied(tensors);
  tensors.lm_head = tensors.wte;
  for (float& x : tensors.lm_head) x *= 2.f;  // doubles every logit, exactly
  sk::Gpt2<sk::Config<D>> untied(tensors);
  CHECK(sk::footprint(untied).params == sk::footprint(tied).params + int64_t(V * C));
  CHECK(sk::footprint(untied).lm_head == V * C * sizeof(float));
  std::vector<int32_t> prompt{1, 2, 3, 4};
  SeqStep s{0, 0, 4};
  std::vector<float> a, b;
  auto ca = tied.make_cache(1), cb = untied.make_cache(1);
  tied.forward(ca, {prompt, std::span(&s, 1)}, a);
  untied.forward(cb, {prompt, std::span(&s, 1)}, b);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); i++) CHECK(b[i] == 2.f * a[i]);
  tensors.lm_head.pop_back();
  CHECK_THROWS_WITH(sk::Gpt2<sk::Config<D>>(tensors), Catch::Contains("lm_head.weight"));
}
