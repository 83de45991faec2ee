// SPDX-License-Identifier: Apache-2.0
// Priority scheduling (EngineOptions::priority_scheduling, Request::priority): requests run in
// priority order on every scheduler, an urgent request preempts the least urgent running one
// when it finds no slot or blocks (continuous), and the tokens and logprobs are those each
// request gets alone, whatever the order. Off, a priority other than 0 is refused.
#include <condition_variable>
#include <mutex>

#include "engine_support.hpp"
#include "host_engine_models.hpp"

namespace serve = servekit::serve;
namespace sched = servekit::serve::sched;
using namespace servekit::test::engine;
using Catch::Matchers::Contains;

namespace {

// The order in which requests end, by their index in the batch (on_end runs on the engine
// thread).
struct EndOrder {
  std::mutex mu;
  std::vector<int> order;
  void watch(serve::Request& r, int i) {
    r.on_end = [this, i] {
      std::lock_guard lk(mu);
      order.push_back(i);
    };
  }
  int place(int i) {
    std::lock_guard lk(mu);
    return static_cast<int>(std::find(order.begin(), order.end(), i) - order.begin());
  }
};

// Holds the engine thread in a request's first token until the test has submitted what must
// arrive while that request runs, so that nothing depends on timing.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, open = false;
  void hold_first_token(serve::Request& r) {
    r.on_piece = [this](std::string_view, const serve::GeneratedToken&) {
      std::unique_lock lk(mu);
      if (!entered) {
        entered = true;
        cv.notify_all();
        cv.wait(lk, [&] { return open; });
      }
      return true;
    };
  }
  template <class Fn>
  auto while_held(Fn fn) {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return entered; });
    auto out = fn();
    open = true;
    cv.notify_all();
    return out;
  }
};

// Runs rs through an engine with priorities, the last request submitted while rs[1] is held in
// its first token (so rs[0] and rs[1] run, and rs[1] is the newer), and checks that every
// request gets the bits it gets alone and that the only preemption is rs[1]'s, once, when
// `preempts` (then the last one ends first), or that there is none.
template <class Model>
void check_urgent_last(Model& m, std::vector<serve::Request> rs, serve::EngineOptions opt,
                       bool preempts) {
  const auto want = alone(m, rs);
  const int n = static_cast<int>(rs.size()), last = n - 1;
  EndOrder ends;
  for (int i = 0; i < n; i++) ends.watch(rs[i], i);
  Gate gate;
  gate.hold_first_token(rs[1]);
  opt.priority_scheduling = true;
  serve::Engine<Model, sched::Continuous> engine(m, tokenizer(), opt);
  std::vector<serve::RequestHandle> hs;
  for (int i = 0; i < last; i++) hs.push_back(engine.submit(rs[i]));
  hs.push_back(gate.while_held([&] { return engine.submit(rs[last]); }));
  std::vector<serve::Result> got;
  for (auto& h : hs) got.push_back(h.get());
  for (int i = 0; i < n; i++) {
    REQUIRE(got[i].error == "");
    check_same(want[i], got[i], i, true);
    CHECK(got[i].metrics.preemptions == (preempts && i == 1 ? 1 : 0));
  }
  if (preempts) CHECK(ends.place(last) == 0);
  engine.wait_idle();
  const auto s = engine.stats();
  CHECK(s.preemptions == (preempts ? 1 : 0));
  CHECK(s.slots_free == s.slots);
  CHECK(s.cache_blocks_free == s.cache_blocks);
}

}  // namespace

TEMPLATE_TEST_CASE("priorities: the same bits as alone, whatever order they run in",
                   "[engine][priority]", Contig, Paged) {
  auto& m = model<TestType>();
  auto rs = make_requests({.n = 16, .max_prompt = 200, .max_new = 60}, D::vocab, 71);
  for (std::size_t i = 0; i < rs.size(); i++) rs[i].priority = static_cast<int>(i * 7 % 5) - 2;
  auto want = alone(m, rs);
  serve::EngineOptions opt{.max_batch = 4, .max_batched_tokens = 128};
  opt.priority_scheduling = true;
  SECTION("continuous") {
    auto s = run_and_compare<TestType, sched::Continuous>(m, rs, want, opt);
    CHECK(s.chunked_prefills > 0);
  }
  SECTION("static") {
    run_and_compare<TestType, sched::Static>(m, rs, want, opt);
  }
  SECTION("sequential") {
    run_and_compare<TestType, sched::Sequential<>>(m, rs, want, opt);
  }
  if constexpr (std::is_same_v<TestType, Paged>) {
    SECTION("continuous, a pool too small for the batch: preemption by recompute") {
      opt.kv_blocks = 40;
      opt.max_batched_tokens = 64;
      auto s = run_and_compare<TestType, sched::Continuous>(m, rs, want, opt);
      CHECK(s.preemptions > 0);
    }
  }
}

TEST_CASE("priorities: one at a time, requests end in priority order, then first come",
          "[engine][priority]") {
  auto& m = model<Paged>();
  auto rs = make_requests({.n = 12, .max_prompt = 40, .max_new = 8}, D::vocab, 72);
  const int prio[12] = {3, 0, -1, 3, 0, 5, -1, 0, 3, -4, 0, 5};
  EndOrder ends;
  for (int i = 0; i < 12; i++) rs[i].priority = prio[i], ends.watch(rs[i], i);
  serve::EngineOptions opt{.max_batch = 1};
  opt.priority_scheduling = true;
  serve::Engine<Paged, sched::Sequential<>> engine(m, tokenizer(), opt);
  // All twelve reach the engine in one hand-over, so the first is not already running.
  const auto got = engine.run_all(rs);
  for (const auto& g : got) REQUIRE(g.error == "");
  std::vector<int> want(12);
  std::iota(want.begin(), want.end(), 0);
  std::stable_sort(want.begin(), want.end(), [&](int a, int b) { return prio[a] < prio[b]; });
  CHECK(ends.order == want);
}

TEMPLATE_TEST_CASE("priorities: an urgent request preempts the least urgent running one",
                   "[engine][priority][threads]", Contig, Paged) {
  // Three long requests of priority 1 on two slots, then, while the first two run, a short one
  // of priority -1: it takes the newer one's slot at once and ends long before the first.
  auto rs = make_requests(
      {.n = 4, .min_prompt = 30, .max_prompt = 50, .min_new = 400, .max_new = 400}, D::vocab, 73);
  rs[3].stop.max_new_tokens = 10;
  for (int i = 0; i < 3; i++) rs[i].priority = 1;
  rs[3].priority = -1;
  check_urgent_last(model<TestType>(), rs, {.max_batch = 2}, true);
}

TEST_CASE("priorities: an urgent request takes the blocks it needs from the least urgent",
          "[engine][priority][threads]") {
  // A pool of 40 blocks of 16 holds two requests of 250-token prompts and 60 new tokens whole
  // (20 blocks each at the end), so they never preempt each other; an urgent one's 150-token
  // prompt (10 blocks) finds at most 8 free until the newer one is preempted.
  auto rs = make_requests(
      {.n = 3, .min_prompt = 250, .max_prompt = 250, .min_new = 60, .max_new = 60}, D::vocab, 74);
  rs[2].prompt_ids.resize(150);
  rs[2].stop.max_new_tokens = 10;
  rs[0].priority = rs[1].priority = 2;
  check_urgent_last(model<Paged>(), rs, {.max_batch = 4, .kv_blocks = 40}, true);
}

TEST_CASE("priorities: nobody is preempted when that would still leave too few blocks",
          "[engine][priority][threads]") {
  // A pool of 40 blocks: a request of priority -1 (a 300-token prompt, 19 blocks, and 60 new
  // tokens) and one of priority 5 (100 tokens, 7 blocks, and 100 new) hold it, never more than
  // 36 blocks together; a third of priority -1 needs 22 blocks for its 350-token prompt and the
  // watermark's one, more than the free ones and the less urgent second one's together. It
  // waits for the first to end, and the second runs on untouched.
  auto rs = make_requests(
      {.n = 3, .min_prompt = 300, .max_prompt = 300, .min_new = 60, .max_new = 60}, D::vocab, 76);
  rs[0].priority = -1;
  rs[1].prompt_ids.resize(100);
  rs[1].stop.max_new_tokens = 100;
  rs[1].priority = 5;
  rs[2].prompt_ids.resize(350);
  for (auto& t : rs[2].prompt_ids) t = (t * 7 + 3) % D::vocab;
  rs[2].stop.max_new_tokens = 10;
  rs[2].priority = -1;
  check_urgent_last(model<Paged>(), rs, {.max_batch = 4, .kv_blocks = 40}, false);
}

TEST_CASE("priorities: off, a priority other than 0 is refused, naming it", "[engine][priority]") {
  auto& m = model<Paged>();
  auto rs = make_requests({.n = 1, .max_prompt = 20, .max_new = 4}, D::vocab, 75);
  serve::Engine<Paged, sched::Continuous> engine(m, tokenizer(), {});
  rs[0].priority = 3;
  REQUIRE_THROWS_WITH(engine.submit(rs[0]),
                      Contains("priority 3 asked for, but this engine schedules first come"));
  rs[0].priority = 0;
  CHECK(engine.submit(rs[0]).get().error == "");
}
