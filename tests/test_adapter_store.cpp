// SPDX-License-Identifier: Apache-2.0
// The adapter tiers: save_adapter writes what load_adapter (and PEFT) read; the AdapterStore
// loads on its own thread, keeps its host tier within its bytes (least recently used dropped
// first) and reports bad adapters with the file and field at fault; and the engine, loading
// adapters just in time into a device tier too small for all of them, gives every request the
// tokens it gets alone with its adapter, evicts only adapters no request holds, and fails a
// request whose adapter is bad without disturbing the others.
#include <catch2/catch.hpp>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>

#include "engine_support.hpp"
#include "servekit/lora/adapter_store.hpp"
#include "servekit/lora/random_adapter.hpp"
#include "servekit/lora/save_adapter.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/engine.hpp"
#include "support/reference.hpp"
#include "support/safetensors_writer.hpp"

namespace sk = servekit;
namespace fs = std::filesystem;
namespace sched = sk::serve::sched;
using sk::test::fixture_dir;
using namespace sk::test::engine;

namespace {
using D = sk::dims::TinyA;
using Model = sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Paged<16>, sk::lora::Gathered>>;

// n random adapters of one rank on every linear (so all have the same bytes), saved as
// dir/a0, dir/a1, ...
std::vector<sk::lora::Adapter> save_random(const fs::path& dir, int n, int rank, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<sk::lora::Adapter> out;
  for (int i = 0; i < n; i++) {
    out.push_back(sk::lora::random_adapter<D>(
        {.name = "a" + std::to_string(i), .rank = rank, .alpha = 2.f * rank, .stddev = 0.07f},
        rng));
    sk::lora::save_adapter(out.back(), dir / out.back().name);
  }
  return out;
}

// Collects what the store's loader thread reports.
struct Listener {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<sk::lora::Loaded> got;
  void operator()(sk::lora::Loaded l) {
    std::lock_guard lk(mu);
    got.push_back(std::move(l));
    cv.notify_all();
  }
  std::size_t count() {
    std::lock_guard lk(mu);
    return got.size();
  }
  sk::lora::Loaded wait(std::size_t n) {  // the n-th report (1-based)
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return got.size() >= n; });
    return got[n - 1];
  }
};

}  // namespace

TEST_CASE("save_adapter writes what load_adapter reads back", "[lora][store]") {
  sk::testing::TempDir tmp;
  std::mt19937_64 rng(1);
  const auto a = sk::lora::random_adapter<D>({.name = "x",
                                              .rank = 5,
                                              .alpha = 7,
                                              .targets = {true, false, true, false},
                                              .layer_share = 0.5},
                                             rng);
  sk::lora::save_adapter(a, tmp.path() / "x");
  const auto b = sk::lora::load_adapter<D>(tmp.path() / "x");
  CHECK(b.rank == 5);
  CHECK(b.alpha == 7);
  CHECK(b.scale == Approx(7.0 / 5));
  CHECK(b.targets == std::array<bool, 4>{true, false, true, false});
  CHECK(b.bytes() == a.bytes());
  for (int l = 0; l < D::n_layer; l++)
    for (int t = 0; t < sk::lora::kTargets; t++) {
      const auto* p = a.find(l, static_cast<sk::lora::Target>(t));
      const auto* q = b.find(l, static_cast<sk::lora::Target>(t));
      REQUIRE((p == nullptr) == (q == nullptr));
      if (p) CHECK((p->a == q->a && p->b == q->b));
    }
}

TEST_CASE("the store loads on its thread and keeps its host tier within its bytes",
          "[lora][store]") {
  sk::testing::TempDir tmp;
  const auto ads = save_random(tmp.path(), 4, 8, 2);
  const std::size_t one = ads[0].bytes();
  Listener heard;
  sk::lora::AdapterStore<D> store({.host_bytes = 2 * one + one / 2});
  store.listen(std::ref(heard));
  for (int i = 0; i < 3; i++)
    store.add("a" + std::to_string(i), tmp.path() / ("a" + std::to_string(i)));

  // A miss returns nothing and loads in the background; the next fetch hits.
  CHECK(store.fetch("a0") == nullptr);
  // Asked again: still loading (nothing) or already loaded (a hit), never a second load.
  const auto again = store.fetch("a0");
  auto l0 = heard.wait(1);
  CHECK(l0.id == "a0");
  CHECK(l0.error == "");
  REQUIRE(l0.adapter);
  CHECK(l0.adapter->name == "a0");
  CHECK(store.fetch("a0") == l0.adapter);
  CHECK((again == nullptr || again == l0.adapter));

  CHECK(store.fetch("a1") == nullptr);
  heard.wait(2);
  CHECK(store.fetch("a0") != nullptr);  // a0 is now the most recently used
  CHECK(store.fetch("a2") == nullptr);  // room for two: a1, the least recently used, goes
  heard.wait(3);
  CHECK(store.in_memory("a0"));
  CHECK_FALSE(store.in_memory("a1"));
  CHECK(store.in_memory("a2"));
  // An id that is a folder names that folder (LoRAX's adapter_source "local").
  const std::string by_path = (tmp.path() / "a3").string();
  auto a3 = store.get(by_path);
  CHECK(a3->name == by_path);
  CHECK(a3->bytes() == one);

  const auto c = store.counters();
  CHECK(c.disk_loads == 4);
  CHECK(c.host_misses == 4);
  CHECK(c.host_hits == 2 + (again != nullptr));
  CHECK(heard.count() == 3);  // a0, a1, a2: one report per load (get() reads on the caller)
  CHECK(c.host_evictions == 2);
  CHECK(c.host_resident == 2);
  CHECK(c.host_bytes == 2 * one);
  CHECK(c.load_failures == 0);
  CHECK(c.disk_load_ms > 0);
}

TEST_CASE("the store names the file and field of a bad adapter", "[lora][store][errors]") {
  sk::testing::TempDir tmp;
  save_random(tmp.path(), 1, 8, 3);
  fs::create_directories(tmp.path() / "empty");
  fs::copy(tmp.path() / "a0", tmp.path() / "badr", fs::copy_options::recursive);
  std::ofstream(tmp.path() / "badr" / "adapter_config.json")
      << R"({"peft_type": "LORA", "r": "four", "target_modules": ["c_attn"]})";
  Listener heard;
  sk::lora::AdapterStore<D> store({.limits = {.max_rank = 4}});
  store.listen(std::ref(heard));
  REQUIRE_THROWS_WITH(store.add("x", tmp.path() / "missing"), Catch::Contains("is not a folder"));
  REQUIRE_THROWS_WITH(store.fetch("nope"), Catch::Contains("adapter 'nope' is neither registered"));
  store.add("empty", tmp.path() / "empty");
  store.add("badr", tmp.path() / "badr");
  store.add("big", tmp.path() / "a0");
  CHECK(store.fetch("empty") == nullptr);
  CHECK_THAT(heard.wait(1).error, Catch::Contains("no adapter_config.json"));
  CHECK(store.fetch("badr") == nullptr);
  const auto e = heard.wait(2).error;
  CHECK_THAT(e, Catch::Contains("badr/adapter_config.json") && Catch::Contains("field 'r'"));
  REQUIRE_THROWS_WITH(store.get("big"),
                      Catch::Contains("field 'r' is 8, above the maximum rank 4"));
  CHECK(store.counters().load_failures == 3);
  CHECK(store.counters().host_resident == 0);
}

TEST_CASE("the engine loads adapters just in time into a small device tier",
          "[lora][store][engine]") {
  sk::testing::TempDir tmp;
  const auto ads = save_random(tmp.path(), 6, 8, 4);
  const std::size_t one = ads[0].bytes();
  // The oracle: every adapter pinned in its own model, each request alone.
  std::vector<std::string> ids;
  auto oracle = Model::load(fixture_dir<D>());
  for (int i = 0; i < 6; i++) {
    // Four by registered name, two by folder path.
    ids.push_back(i < 4 ? ads[i].name : (tmp.path() / ads[i].name).string());
    auto a = ads[i];
    a.name = ids.back();
    oracle.add_adapter(std::move(a));
  }
  auto rs = make_requests({.n = 30, .max_prompt = 40, .max_new = 24}, D::vocab, 11);
  std::mt19937 rng(5);
  for (auto& r : rs)
    if (rng() % 5) r.adapter = ids[rng() % ids.size()];
  sk::serve::Engine<Model, sched::Sequential<sched::KvCache>> one_by_one(oracle, tokenizer(),
                                                                         {.max_batch = 1});
  auto alone_rs = rs;
  for (auto& r : alone_rs) r.top_logprobs = 2;
  const auto want = one_by_one.run_all(alone_rs);

  for (int capacity : {1, 2, 6}) {
    INFO("device tier: " << capacity << " adapters, host tier: 3");
    auto model = Model::load(fixture_dir<D>());
    sk::serve::EngineOptions opt{.max_batch = 6, .max_batched_tokens = 64};
    opt.adapter_device_bytes = capacity * one;
    opt.adapter_host_bytes = 3 * one;
    sk::serve::Engine<Model, sched::Continuous> engine(model, tokenizer(), opt);
    for (int i = 0; i < 4; i++) engine.adapters().add(ids[i], tmp.path() / ads[i].name);
    auto got = engine.run_all(rs);
    int parted = 0;
    for (std::size_t i = 0; i < rs.size(); i++) {
      INFO("request " << i << " adapter " << rs[i].adapter.value_or("(none)"));
      REQUIRE(got[i].error == "");
      parted += check_same(want[i], got[i], i, true);
    }
    CHECK(parted <= 2);
    engine.wait_idle();
    const auto s = engine.stats();
    const auto& d = s.adapters.device;
    CHECK(d.bytes <= capacity * one);
    CHECK(d.uploads >= 6);
    CHECK(s.adapters.host.disk_loads >= 6);
    CHECK(s.adapters.parked == 0);
    CHECK(s.max_step_adapters <= capacity);  // in-use adapters are never evicted
    if (capacity < 6) {
      CHECK(d.evictions >= 6 - capacity);
      CHECK(s.adapters.host.host_evictions > 0);
    } else {
      CHECK(d.evictions == 0);
      CHECK(d.uploads == 6);
    }
  }
}

TEST_CASE("a bad adapter fails only its own request", "[lora][store][engine][errors]") {
  sk::testing::TempDir tmp;
  const auto ads = save_random(tmp.path(), 2, 4, 6);
  fs::create_directories(tmp.path() / "empty");
  {  // an adapter for another base model (tiny-b: 3 layers, 96 features)
    std::mt19937_64 rng(1);
    sk::lora::save_adapter(sk::lora::random_adapter<sk::dims::TinyB>({.name = "b", .rank = 4}, rng),
                           tmp.path() / "other");
  }
  std::mt19937_64 rng(2);
  sk::lora::save_adapter(sk::lora::random_adapter<D>({.name = "r16", .rank = 16}, rng),
                         tmp.path() / "r16");

  auto oracle = Model::load(fixture_dir<D>());
  oracle.add_adapter(ads[0]);
  auto model = Model::load(fixture_dir<D>());
  sk::serve::EngineOptions opt{.max_batch = 4};
  opt.adapter_max_rank = 8;
  sk::serve::Engine<Model, sched::Continuous> engine(model, tokenizer(), opt);
  engine.adapters().add("a0", tmp.path() / "a0");
  engine.adapters().add("empty", tmp.path() / "empty");
  engine.adapters().add("other", tmp.path() / "other");
  engine.adapters().add("r16", tmp.path() / "r16");

  auto rs = make_requests({.n = 6, .max_prompt = 20, .max_new = 12}, D::vocab, 3);
  rs[0].adapter = "a0", rs[1].adapter = "empty", rs[2].adapter = "other";
  rs[3].adapter = "r16", rs[4].adapter = "a0";  // rs[5]: the base model
  auto got = engine.run_all(rs);
  CHECK(got[1].finish_reason == "error");
  CHECK_THAT(got[1].error, Catch::Contains("empty: no adapter_config.json"));
  CHECK(got[2].finish_reason == "error");
  CHECK_THAT(got[2].error, Catch::Contains("other/adapter_model.safetensors") &&
                               Catch::Contains("is for layer 2; the base model has 2 layers"));
  CHECK(got[3].finish_reason == "error");
  CHECK_THAT(got[3].error, Catch::Contains("r16/adapter_config.json") &&
                               Catch::Contains("above the maximum rank 8"));
  // The others run as they would alone.
  sk::serve::Engine<Model, sched::Sequential<sched::KvCache>> one(oracle, tokenizer(),
                                                                  {.max_batch = 1});
  for (int i : {0, 4, 5}) {
    INFO("request " << i);
    auto r = rs[i];
    r.top_logprobs = 2;
    check_same(one.generate(r), got[i], i, true);
  }
  // An unknown id is refused at submit; the engine serves on.
  auto bad = rs[0];
  bad.adapter = "nowhere";
  REQUIRE_THROWS_WITH(engine.submit(bad),
                      Catch::Contains("adapter 'nowhere' is not in the model, not registered"));
  auto again = engine.generate(rs[0]);
  CHECK(again.ids() == got[0].ids());
  CHECK(engine.stats().adapters.host.load_failures == 3);
}
