// SPDX-License-Identifier: Apache-2.0
// Every KV layout against Hugging Face: the course's left-padded batch rebuilt by
// serve::PaddedBatch (tokens, mask and position ids equal HF's, logits at the real positions
// equal HF's), and the paged cache on single prompts and a ragged batch, with block sizes
// that put block boundaries inside prompts.
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>

#include "kv_support.hpp"
#include "servekit/serve/padded_batch.hpp"
#include "support/reference.hpp"

namespace sk = servekit;
using sk::model::Logits;
using sk::model::SeqStep;
using sk::test::Combo;
using sk::test::row;

namespace {
constexpr float kTol = 1e-4f;  // fp32 compute on both sides; only summation order differs

std::vector<int32_t> read_i64(const sk::io::SafetensorsFile& st, const std::string& name) {
  const auto& t = st.at(name);
  std::vector<int64_t> v(t.numel());
  sk::io::read_bytes(t, std::as_writable_bytes(std::span(v)));
  return {v.begin(), v.end()};
}
}  // namespace

using A_Contig = Combo<sk::dims::TinyA, sk::kv::Contiguous>;
using B_Contig = Combo<sk::dims::TinyB, sk::kv::Contiguous>;
using A_Paged4 = Combo<sk::dims::TinyA, sk::kv::Paged<4>>;
using B_Paged3 = Combo<sk::dims::TinyB, sk::kv::Paged<3>>;
using A_Paged1 = Combo<sk::dims::TinyA, sk::kv::Paged<1>>;
using B_Paged16 = Combo<sk::dims::TinyB, sk::kv::Paged<16>>;

TEMPLATE_TEST_CASE("a left-padded batch reproduces HF's padded batch", "[hf][kv][padded]", A_Contig,
                   B_Contig, A_Paged4, B_Paged3) {
  using D = typename TestType::Dims;
  using Model = typename TestType::Model;
  constexpr int V = D::vocab;
  auto model = Model::load(sk::test::fixture_dir<D>());
  const auto ref = sk::test::load_reference(sk::test::fixture_dir<D>());
  const auto& b = ref.batch;
  const int B = static_cast<int>(b.prompt_ids.size());
  REQUIRE(B == 3);
  std::ifstream in(sk::test::fixture_dir<D>() / "reference.json");
  const int32_t pad_id = nlohmann::json::parse(in)["batch"]["pad_id"];
  const auto st =
      sk::io::SafetensorsFile::open(sk::test::fixture_dir<D>() / "reference.safetensors");

  sk::serve::PaddedBatch pb(b.prompt_ids, pad_id);
  REQUIRE(pb.t_pad() == b.t_pad);
  CHECK(pb.tokens() == read_i64(st, "batch.input_ids"));
  CHECK(pb.attention_mask() == read_i64(st, "batch.attention_mask"));
  CHECK(pb.position_ids() == read_i64(st, "batch.position_ids"));

  auto cache = model.make_cache(B, b.t_pad + b.n_steps);
  std::vector<float> logits;
  pb.prefill(model, cache, logits, Logits::All);
  REQUIRE(logits.size() == b.logits.size());
  for (int i = 0; i < B; i++)
    for (int t = 0; t < b.t_pad; t++) {
      if (!b.attention_mask[i * b.t_pad + t]) continue;  // HF's pad rows are meaningless too
      INFO("row " << i << " column " << t);
      CHECK(sk::test::max_abs_diff(row(logits, i * b.t_pad + t, V),
                                   row(b.logits, i * b.t_pad + t, V)) <= kTol);
    }
  // Every row occupies t_pad cache rows, pads included.
  for (int i = 0; i < B; i++) CHECK(cache.length(i) == b.t_pad);

  // The same prefill keeping only the last column, then HF's batched greedy decode.
  cache = model.make_cache(B, b.t_pad + b.n_steps);
  sk::serve::PaddedBatch run(b.prompt_ids, pad_id);
  run.prefill(model, cache, logits);
  REQUIRE(logits.size() == static_cast<std::size_t>(B) * V);
  for (int i = 0; i < B; i++) {
    CHECK(sk::test::max_abs_diff(row(logits, i, V), row(b.logits, i * b.t_pad + b.t_pad - 1, V)) <=
          kTol);
    CHECK(sk::serve::argmax(row(logits, i, V)) == b.greedy_ids[i][0]);
  }
  std::vector<int32_t> next(B);
  for (int step = 0; step < b.n_steps; step++) {
    for (int i = 0; i < B; i++) next[i] = b.greedy_ids[i][step];
    run.decode(model, cache, next, logits);
    for (int i = 0; i < B; i++) {
      INFO("row " << i << " decode step " << step);
      CHECK(sk::test::max_abs_diff(row(logits, i, V),
                                   row(b.step_logits, i * b.n_steps + step, V)) <= kTol);
      CHECK(sk::serve::argmax(row(logits, i, V)) == b.greedy_ids[i][step + 1]);
    }
  }
  for (int i = 0; i < B; i++) CHECK(cache.length(i) == b.t_pad + b.n_steps);
  const auto cap = cache.capacity();
  CHECK(cap.stored_tokens == B * (b.t_pad + b.n_steps));
}

TEMPLATE_TEST_CASE("a paged cache matches HF on every case and on the ragged batch",
                   "[hf][kv][paged]", A_Paged4, B_Paged3, A_Paged1, B_Paged16) {
  using D = typename TestType::Dims;
  using Model = typename TestType::Model;
  constexpr int V = D::vocab;
  auto model = Model::load(sk::test::fixture_dir<D>());
  const auto ref = sk::test::load_reference(sk::test::fixture_dir<D>());
  std::vector<float> logits;

  // One slot reused case after case: release() returns the blocks, the next case takes them.
  auto cache = model.make_cache(1);
  for (const auto& c : ref.cases) {
    INFO("case " << c.name);
    const int T = static_cast<int>(c.prompt_ids.size());
    SeqStep s{0, 0, T};
    model.forward(cache, {c.prompt_ids, std::span(&s, 1), Logits::All}, logits);
    CHECK(sk::test::max_abs_diff(logits, c.prefill_logits) <= kTol);
    int n_past = T;
    for (int step = 0; step < ref.n_steps; step++) {
      INFO("decode step " << step);
      int32_t next = c.greedy_ids[step];
      SeqStep d{0, n_past++, 1};
      model.forward(cache, {std::span(&next, 1), std::span(&d, 1), Logits::Last}, logits);
      CHECK(sk::test::max_abs_diff(logits, row(c.step_logits, step, V)) <= kTol);
      CHECK(sk::serve::argmax(logits) == c.greedy_ids[step + 1]);
    }
    CHECK(cache.blocks_held(0) ==
          (n_past + TestType::Kv::block_tokens - 1) / TestType::Kv::block_tokens);
    cache.release(0);
    CHECK(cache.free_blocks() == cache.n_blocks());
  }

  // The course's prompts as a ragged batch: no padding, HF's padded-batch logits.
  const auto& b = ref.batch;
  const int B = static_cast<int>(b.prompt_ids.size());
  auto bc = model.make_cache(B, b.t_pad + b.n_steps);
  std::vector<int32_t> tokens;
  std::vector<SeqStep> seqs;
  for (int i = 0; i < B; i++) {
    seqs.push_back({i, 0, static_cast<int32_t>(b.prompt_ids[i].size())});
    tokens.insert(tokens.end(), b.prompt_ids[i].begin(), b.prompt_ids[i].end());
  }
  model.forward(bc, {tokens, seqs, Logits::All}, logits);
  int r = 0;
  for (int i = 0; i < B; i++) {
    const int T = static_cast<int>(b.prompt_ids[i].size());
    for (int t = 0; t < T; t++, r++) {
      INFO("sequence " << i << " position " << t);
      CHECK(sk::test::max_abs_diff(row(logits, r, V),
                                   row(b.logits, i * b.t_pad + b.t_pad - T + t, V)) <= kTol);
    }
  }
  for (int step = 0; step < b.n_steps; step++) {
    tokens.clear();
    for (int i = 0; i < B; i++) {
      tokens.push_back(b.greedy_ids[i][step]);
      seqs[i] = {i, static_cast<int32_t>(b.prompt_ids[i].size()) + step, 1};
    }
    model.forward(bc, {tokens, seqs, Logits::Last}, logits);
    for (int i = 0; i < B; i++) {
      INFO("sequence " << i << " decode step " << step);
      CHECK(sk::test::max_abs_diff(row(logits, i, V),
                                   row(b.step_logits, i * b.n_steps + step, V)) <= kTol);
      CHECK(sk::serve::argmax(row(logits, i, V)) == b.greedy_ids[i][step + 1]);
    }
  }
  // Ragged: each sequence stores only its own tokens.
  for (int i = 0; i < B; i++)
    CHECK(bc.length(i) == static_cast<int>(b.prompt_ids[i].size()) + b.n_steps);
}
