// SPDX-License-Identifier: Apache-2.0
// A scheduler written outside the library, against the SchedulerFor concept alone
// (serve/sched/core.hpp): shortest prompt first, whole prompts, no preemption. It plugs into
// the engine like the shipped ones, and every request still gets the tokens it gets alone.
#include "engine_support.hpp"

namespace sk = servekit;
namespace serve = servekit::serve;
using namespace servekit::test::engine;

namespace {

// Each step: every running sequence's next token (or its whole prompt), then as many waiting
// requests as fit a slot and the token budget, shortest uncached prompt first.
struct ShortestPromptFirst {
  static constexpr std::string_view name = "shortest-prompt-first";

  template <class Cache>
  void plan(serve::Core<Cache>& c, std::vector<serve::Work>& out) {
    int budget = c.options().max_batched_tokens;
    int promised = 0;  // blocks the planned work takes
    for (serve::Seq* s : c.running()) {
      const int n = s->uncached();
      promised += c.blocks_needed(*s, n);
      out.push_back({s, n});
      budget -= n;
    }
    while (c.free_slots() > 0 && static_cast<int>(c.running().size()) < c.options().max_batch) {
      std::size_t best = c.waiting().size();
      for (std::size_t i = 0; i < c.waiting().size(); i++)
        if (best == c.waiting().size() ||
            c.waiting()[i]->uncached() < c.waiting()[best]->uncached())
          best = i;
      if (best == c.waiting().size()) break;
      serve::Seq* w = c.waiting()[best];
      const int n = w->uncached(), need = c.blocks_needed(*w, n);
      if (n > budget && !out.empty()) break;
      if (need > c.free_blocks() - promised) break;
      out.push_back({c.admit(best), n});
      promised += need;
      budget -= n;
    }
  }
};

}  // namespace

using D = sk::dims::Tiny<2, 4, 64, 512, 512>;
using Paged = sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Paged<16>>>;
static_assert(serve::SchedulerFor<ShortestPromptFirst, Paged::Cache>);
static_assert(!serve::keeps_finished<ShortestPromptFirst, Paged::Cache>());

TEST_CASE("a scheduler written against the concept runs every request as it runs alone",
          "[engine][scheduler]") {
  auto model = Paged::random(11);
  auto rs = make_requests({.n = 24, .max_prompt = 120, .max_new = 40}, D::vocab, 5);
  auto want = alone(model, rs);
  serve::EngineOptions opt{.max_batch = 4, .max_batched_tokens = 512};
  auto s = run_and_compare<Paged, ShortestPromptFirst>(model, rs, want, opt);
  CHECK(s.finished == 24);
  CHECK(s.preemptions == 0);
}
