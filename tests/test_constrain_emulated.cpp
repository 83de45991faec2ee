// SPDX-License-Identifier: Apache-2.0
// Constrained decoding with the device kernels, run by the emulator here and, compiled by nvcc
// (tests/cuda/test_constrain_cuda.cu), by a GPU: forward_pick's mask arguments, and the engine's
// constrained rows (masks built per step, only for rows that sample) against generate() alone.
// The mask kernel's own test: test_kernels_mask.cpp.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <filesystem>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "device_backend.hpp"
#include "servekit/kernels/token_mask.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/engine.hpp"
#include "servekit/serve/generate.hpp"

namespace sk = servekit;
using namespace servekit;
using json = nlohmann::json;
using Catch::Contains;

namespace {

using D = sk::dims::Tiny<2, 4, 64, 512, 128>;
using Dev = device_test::Backend;
using Model = sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Contiguous, sk::lora::None, Dev>>;

const text::Gpt2Tokenizer& tok() {
  static auto t =
      text::Gpt2Tokenizer::from_dir(std::filesystem::path(SERVEKIT_FIXTURES) / "tiny-vocab");
  return t;
}

}  // namespace

TEST_CASE("device kernels: constrained rows in the engine == generate() alone, and valid",
          "[constrain][emulated]") {
  auto model = Model::random(21);
  const json schemas[] = {
      json::parse(R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                      "age": {"type": "integer"}}, "required": ["name", "age"]})"),
      json::parse(R"({"type": "array", "items": {"enum": ["red", "green"]}, "maxItems": 3})"),
      json::parse(R"({"anyOf": [{"type": "number"}, {"type": "null"}]})")};
  std::vector<serve::Request> rs;
  for (int i = 0; i < 8; i++) {
    serve::Request r;
    r.prompt = "Request " + std::to_string(i) + ":";
    r.stop.max_new_tokens = 30;
    r.sampling = {.temperature = i % 3 == 0 ? 0.f : 1.f, .seed = uint64_t(100 + i)};
    if (i % 4 != 3)
      r.json_schema = constrain::compile_json_schema(schemas[i % 3]);
    else
      r.stop.stop_at_eos = false;
    rs.push_back(r);
  }
  // Masks made while the forward runs (the default) and before it is launched.
  const bool late = GENERATE(true, false);
  INFO("late masks: " << late);
  serve::EngineOptions opt{.max_batch = 3, .max_batched_tokens = 12};
  opt.late_masks = late;
  serve::Engine<Model, serve::sched::Continuous> engine(model, tok(), opt);
  std::vector<serve::RequestHandle> hs;
  for (const auto& r : rs) hs.push_back(engine.submit(r));
  std::vector<serve::Result> got;  // all of them before generate() uses the model
  for (auto& h : hs) got.push_back(h.get());
  for (std::size_t i = 0; i < rs.size(); i++) {
    serve::GenerateOptions o{
        .sampling = rs[i].sampling, .stop = rs[i].stop, .json_schema = rs[i].json_schema};
    const serve::Result want = serve::generate(model, tok(), tok().encode(rs[i].prompt), o);
    INFO("request " << i << ": " << got[i].text << " / " << got[i].error);
    CHECK(got[i].ids() == want.ids());
    for (std::size_t t = 0; t < std::min(got[i].tokens.size(), want.tokens.size()); t++)
      CHECK(got[i].tokens[t].logprob == want.tokens[t].logprob);
    if (rs[i].json_schema) {
      CHECK(got[i].finish_reason == serve::finish::eos);
      CHECK_NOTHROW(json::parse(got[i].text));
    }
  }
  engine.wait_idle();
  CHECK(engine.stats().forced_tokens > 0);  // jump-forward ran, and changed no token
}

TEST_CASE("forward_pick names the mask argument it cannot use", "[constrain][emulated]") {
  auto model = Model::random(22);
  auto cache = model.make_cache(2);
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const std::vector<model::SeqStep> seqs = {{0, 0, 2, 0}, {1, 0, 2, 0}};
  const model::Batch batch{tokens, seqs, model::Logits::Last, {}};
  std::vector<int32_t> ids(2);
  std::vector<float> lp(2);
  const int W = (D::vocab + 31) / 32;
  std::vector<uint32_t> masks(W, ~0u);
  std::vector<kernels::RowSampling> rows(2);
  rows[1].mask = 1;  // only one mask given
  REQUIRE_THROWS_WITH(model.forward_pick(cache, batch, rows, ids, lp, nullptr, masks),
                      Contains("row 1 names mask 1 of 1"));
  rows[1].mask = -1;
  REQUIRE_THROWS_WITH(model.forward_pick(cache, batch, rows, ids, lp, nullptr, masks),
                      Contains("1 masks but 0 rows name one"));
  masks.pop_back();
  REQUIRE_THROWS_WITH(model.forward_pick(cache, batch, rows, ids, lp, nullptr, masks),
                      Contains("not a multiple of"));
  // One allowed token: the row must pick it, whatever the logits.
  std::vector<uint32_t> one(W, 0u);
  one[200 / 32] = 1u << (200 % 32);
  rows[0].mask = 0, rows[0].temperature = 1.f, rows[0].seed = 5;
  model.forward_pick(cache, batch, rows, ids, lp, nullptr, one);
  CHECK(ids[0] == 200);
  CHECK(lp[0] == 0.f);

  // Late masks: what the writer leaves is what applies (not what the buffer held at launch),
  // and a writer that throws fails the step with its message, after which steps run again.
  std::vector<uint32_t> late_mask(W, ~0u);
  int allow = 301;
  auto write_late = [&] {
    if (allow < 0) throw Error("the grammar failed here");
    std::fill(late_mask.begin(), late_mask.end(), 0u);
    late_mask[allow / 32] = 1u << (allow % 32);
  };
  model::Batch b = batch;
  b.sampling = rows, b.masks = late_mask, b.late_masks = model::MaskWriter::of(write_late);
  const std::vector<model::SeqStep> next = {{0, 2, 2, 0}, {1, 2, 2, 0}};
  b.seqs = next;
  model.forward_pick(cache, b, ids, lp);
  CHECK(ids[0] == 301);
  CHECK(lp[0] == 0.f);
  allow = -1;
  std::fill(late_mask.begin(), late_mask.end(), ~0u);
  const std::vector<model::SeqStep> third = {{0, 4, 2, 0}, {1, 4, 2, 0}};
  b.seqs = third;
  REQUIRE_THROWS_WITH(model.forward_pick(cache, b, ids, lp), Contains("the grammar failed here"));
  allow = 77;
  model.forward_pick(cache, b, ids, lp);
  CHECK(ids[0] == 77);
}
