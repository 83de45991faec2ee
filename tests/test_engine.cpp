// SPDX-License-Identifier: Apache-2.0
// The serving engine on the host backend: every scheduler gives every request the tokens it
// gets alone (greedy and seeded sampling), with preemption and chunked prefill forced; static
// batching's step count; 8 threads submitting and cancelling; bad requests.
#include <atomic>
#include <cmath>
#include <set>
#include <thread>

#include <unistd.h>

#include "engine_support.hpp"
#include "host_engine_models.hpp"
#include "support/vocab_prefix.hpp"

namespace sk = servekit;
namespace serve = servekit::serve;
namespace sched = servekit::serve::sched;
using namespace servekit::test::engine;
using Catch::Contains;

// [invariance]: the long comparisons of many requests, which the sanitizer build leaves to this
// one (tests/sanitize.cmake).
TEMPLATE_TEST_CASE("every scheduler gives each request its tokens alone (greedy)",
                   "[engine][invariance]", Contig, Paged) {
  auto& m = model<TestType>();
  auto rs = make_requests({}, D::vocab, 1);
  auto want = alone(m, rs);
  serve::EngineOptions opt{.max_batch = 8, .max_batched_tokens = 256};
  SECTION("sequential") {
    run_and_compare<TestType, sched::Sequential<>>(m, rs, want, opt);
  }
  SECTION("static") {
    auto s = run_and_compare<TestType, sched::Static>(m, rs, want, opt);
    if constexpr (std::is_same_v<TestType, Contig>) CHECK(s.padded_tokens > 0);
  }
  SECTION("continuous") {
    auto s = run_and_compare<TestType, sched::Continuous>(m, rs, want, opt);
    CHECK(s.chunked_prefills > 0);  // 300-token prompts do not fit a 256-token step
  }
  if constexpr (std::is_same_v<TestType, Paged>) {
    SECTION("continuous, a pool too small for the batch: preemption by recompute") {
      opt.kv_blocks = 40;  // 640 rows for 8 sequences of up to 500
      opt.max_batched_tokens = 64;
      auto s = run_and_compare<TestType, sched::Continuous>(m, rs, want, opt);
      CHECK(s.preemptions > 0);
      CHECK(s.chunked_prefills > 0);
    }
  }
}

TEST_CASE("without the cache the sequential scheduler recomputes and agrees",
          "[engine][invariance]") {
  auto& m = model<Contig>();
  auto rs = make_requests({.n = 6, .max_prompt = 40, .max_new = 20}, D::vocab, 2);
  auto want = alone(m, rs);
  run_and_compare<Contig, sched::Sequential<sched::NoCache>>(m, rs, want, {.max_batch = 1});
}

TEMPLATE_TEST_CASE("seeded sampling draws the same tokens whatever shares the steps",
                   "[engine][invariance]", Contig, Paged) {
  auto& m = model<TestType>();
  auto rs = make_requests({.n = 24, .max_prompt = 120, .max_new = 80, .sample = true}, D::vocab, 3);
  auto want = alone(m, rs);
  serve::EngineOptions opt{.max_batch = 8, .max_batched_tokens = 96};
  if constexpr (std::is_same_v<TestType, Paged>)
    opt.kv_blocks = 32;  // the least: one 512-row sequence
  auto s = run_and_compare<TestType, sched::Continuous>(m, rs, want, opt);
  if constexpr (std::is_same_v<TestType, Paged>) CHECK(s.preemptions > 0);
  // And the stream is the seed's: another seed gives other tokens.
  auto other = rs;
  for (auto& r : other) r.sampling.seed ^= 0x9e3779b97f4a7c15ull;
  serve::Engine<TestType, sched::Continuous> engine(m, tokenizer(), opt);
  auto got = engine.run_all(other);
  int same = 0;
  for (std::size_t i = 0; i < rs.size(); i++) same += got[i].ids() == want[i].ids();
  CHECK(same < 4);
}

// Prefix caching changes the work done, never a bit of what a request gets: the same tokens and
// logprobs whether its prefix was cached, partly cached, evicted and recomputed, or caching is
// off, greedy or seeded, with chunked prefill and preemption.
// Not [invariance]: small enough for the sanitizer build, which checks the cache's sharing.
TEST_CASE("prefix caching: every request gets its tokens alone, hit or miss", "[engine][prefix]") {
  auto& m = model<Paged>();
  for (bool sample : {false, true}) {
    INFO((sample ? "seeded sampling" : "greedy"));
    auto rs = make_shared_requests(
        {.n = 30, .prefix = 100, .max_suffix = 40, .max_new = 40, .sample = sample}, D::vocab,
        21 + sample);
    const auto want = alone(m, rs);
    serve::EngineOptions opt{.max_batch = 8, .max_batched_tokens = 64};
    {
      INFO("caching off");
      auto off = opt;
      off.prefix_caching = false;
      auto s = run_and_compare<Paged, sched::Continuous>(m, rs, want, off);
      CHECK_FALSE(s.prefix_caching);
      CHECK(s.prefix_cache_hits == 0);
      CHECK(s.cache_blocks_cached == 0);
    }
    {
      INFO("a roomy pool: hits, nothing evicted");
      std::vector<serve::Result> got;
      auto s = run_and_compare<Paged, sched::Continuous>(m, rs, want, opt, &got);
      CHECK(s.prefix_caching);
      CHECK(s.preemptions == 0);
      long cached = 0, whole_prefix = 0;
      for (const auto& r : got) {
        cached += r.metrics.cached_tokens;
        whole_prefix += r.metrics.cached_tokens >= 96;  // 6 of the prefix's 100 / 16 blocks
        CHECK(r.metrics.cached_tokens % 16 == 0);
        CHECK(r.metrics.cached_tokens < r.metrics.prompt_tokens);
      }
      CHECK(cached == s.prefix_cache_hits);
      CHECK(whole_prefix >= 20);
      CHECK(s.cache_blocks_cached > 0);
    }
    {
      INFO("a pool of one sequence: evictions and preemptions");
      auto small = opt;
      small.kv_blocks = 32;
      auto s = run_and_compare<Paged, sched::Continuous>(m, rs, want, small);
      CHECK(s.preemptions > 0);
      CHECK(s.prefix_cache_hits > 0);
    }
    {
      INFO("nothing kept once released: hits only between sequences running together");
      auto none = opt;
      none.prefix_cache_blocks = 0;
      auto s = run_and_compare<Paged, sched::Continuous>(m, rs, want, none);
      CHECK(s.cache_blocks_cached == 0);
    }
    {
      INFO("one request at a time");
      auto s = run_and_compare<Paged, sched::Sequential<>>(m, rs, want, opt);
      CHECK(s.prefix_cache_hits > 0);
    }
    // A static batch pads its prompts to a common length: it reuses nothing.
    if (!sample)
      CHECK_FALSE(run_and_compare<Paged, sched::Static>(m, rs, want, opt).prefix_caching);
  }
}

TEST_CASE("the n-gram proposer copies what followed the latest earlier match", "[spec]") {
  serve::Speculation sp{.k = 3, .ngram_max = 2, .ngram_min = 1};
  std::vector<int32_t> out;
  auto propose = [&](std::vector<int32_t> t, int k) {
    serve::propose_ngram(t, sp, k, out);
    return out;
  };
  using V = std::vector<int32_t>;
  // "5 6" recurs; its latest earlier occurrence is followed by 9 8 7.
  CHECK(propose({5, 6, 1, 2, 5, 6, 9, 8, 7, 4, 5, 6}, 3) == V{9, 8, 7});
  CHECK(propose({5, 6, 1, 2, 5, 6, 9, 8, 7, 4, 5, 6}, 2) == V{9, 8});
  // No 2-gram recurs: the last token alone ("3") does, followed by 1.
  CHECK(propose({3, 1, 2, 7, 3}, 3) == V{1, 2, 7});
  // A loop is copied on past the end of the text, period by period.
  CHECK(propose({4, 4, 4}, 3) == V{4, 4, 4});
  CHECK(propose({9, 1, 2, 1, 2}, 3) == V{1, 2, 1});
  CHECK(propose({1, 2, 3}, 3).empty());  // nothing recurs
  CHECK(propose({1}, 3).empty());
  CHECK(propose({1, 2, 1}, 0).empty());
  sp.ngram_min = 2;  // the 1-gram match no longer counts
  CHECK(propose({3, 1, 2, 7, 3}, 3).empty());
}

TEST_CASE("the step cost: a line through recent decode steps, and when drafting pays", "[spec]") {
  serve::StepCost c;
  // Not known before kMinSteps steps nor while the rows do not vary: drafting always pays.
  for (int i = 0; i < 20; i++) c.observe(4, 0.010);
  CHECK_FALSE(c.fitted());
  CHECK(c.drafting_pays(0.0, 16, 16));
  // seconds = 2 ms + 0.5 ms per row, rows 1..16: the line comes back.
  serve::StepCost d;
  for (int i = 0; i < serve::StepCost::kMinSteps - 1; i++)
    d.observe(1 + i % 16, 0.002 + 0.0005 * (1 + i % 16));
  CHECK_FALSE(d.fitted());
  for (int i = serve::StepCost::kMinSteps - 1; i < 64; i++)
    d.observe(1 + i % 16, 0.002 + 0.0005 * (1 + i % 16));
  REQUIRE(d.fitted());
  CHECK(d.a() == Catch::Detail::Approx(0.002).margin(1e-9));
  CHECK(d.b() == Catch::Detail::Approx(0.0005).margin(1e-9));
  // Batch 1 (one row, one token): a proposal pays when rate * 2.5 ms > 0.5 ms, rate > 0.2.
  CHECK(d.drafting_pays(0.25, 1, 1));
  CHECK_FALSE(d.drafting_pays(0.15, 1, 1));
  // Batch 16: rate * 10 ms > 8 ms, rate > 0.8; rows already drafted raise the bar a little
  // (16 + 4 rows worth 16 + 3.6 tokens: rate * 12 ms > 9.8 ms, rate > 0.817).
  CHECK(d.drafting_pays(0.85, 16, 16));
  CHECK_FALSE(d.drafting_pays(0.75, 16, 16));
  CHECK(d.drafting_pays(0.83, 20, 19.6));
  CHECK_FALSE(d.drafting_pays(0.80, 20, 19.6));
  // The line follows the machine: rows now cost twice as much.
  for (int i = 0; i < 400; i++) d.observe(1 + i % 16, 0.002 + 0.001 * (1 + i % 16));
  CHECK(d.b() == Catch::Detail::Approx(0.001).epsilon(0.01));
  // Steps that stop varying their rows (a batch that stopped speculating) keep the last line.
  for (int i = 0; i < 400; i++) d.observe(8, 0.010);
  CHECK(d.fitted());
  CHECK(d.b() == Catch::Detail::Approx(0.001).epsilon(0.01));
  // Noise that tilts the line downhill: rows are free, never a negative cost.
  serve::StepCost f;
  for (int i = 0; i < 32; i++) f.observe(1 + i % 8, 0.010 - 0.0001 * (i % 8));
  REQUIRE(f.fitted());
  CHECK(f.b() == 0);
  CHECK(f.drafting_pays(0.01, 8, 8));
}

TEST_CASE("a sequence's acceptance rate: hopeful until tried, then a running average", "[spec]") {
  serve::SpecPace p;
  CHECK(p.rate == 1.0f);
  p.verified(4, 0, 4);
  CHECK(p.rate == Catch::Detail::Approx(1 - serve::SpecPace::kRateWeight));
  for (int i = 0; i < 40; i++) p.verified(4, 1, 4);
  CHECK(p.rate == Catch::Detail::Approx(0.25).margin(1e-4));
  p.verified(0, 0, 4);  // nothing proposed: nothing learnt
  CHECK(p.rate == Catch::Detail::Approx(0.25).margin(1e-4));
  // Kept out by the cost rule, it regains hope: a tenth of the way back to 1 each time.
  p.declined();
  CHECK(p.rate == Catch::Detail::Approx(0.325).margin(1e-4));
  for (int i = 0; i < 6; i++) p.declined();
  CHECK(p.rate == Catch::Detail::Approx(1 - 0.75 * std::pow(0.9, 7)).margin(1e-4));
}

TEST_CASE("a sequence's pace: grows on full acceptance, shrinks on rejection, pauses", "[spec]") {
  serve::SpecPace p;
  CHECK(p.allowance(4) == 4);
  p.verified(4, 1, 4);  // one accepted: propose 2 next
  CHECK(p.allowance(4) == 2);
  p.verified(2, 2, 4);  // all accepted: one more
  CHECK(p.allowance(4) == 3);
  for (int i = 0; i < serve::SpecPace::kPatience; i++) {
    CHECK(p.allowance(4) >= 1);
    p.verified(p.k, 0, 4);
  }
  // kPatience verifies accepting nothing: 2 steps off, then one token again.
  CHECK(p.allowance(4) == 0);
  CHECK(p.allowance(4) == 0);
  CHECK(p.allowance(4) == 1);
  for (int i = 0; i < serve::SpecPace::kPatience; i++) p.verified(1, 0, 4);
  int off = 0;
  while (p.allowance(4) == 0) off++;
  CHECK(off == 4);      // the pause doubles
  p.verified(1, 1, 4);  // a hit: back to growing, the pause reset
  CHECK(p.allowance(4) == 2);
  CHECK(p.backoff == 2);
}

// Speculation changes how many tokens a step yields, never a bit of what a request gets: the
// tokens and logprobs of plain decoding, greedy or seeded, with chunked prefill, preemption and
// prefix caching, whatever else shares the steps. Not [invariance]: the sanitizer build runs it.
TEMPLATE_TEST_CASE("speculation: every request gets its tokens alone, proposals or not",
                   "[engine][spec]", Contig, Paged) {
  auto& m = model<TestType>();
  for (bool sample : {false, true}) {
    INFO((sample ? "seeded sampling" : "greedy"));
    auto rs =
        make_repetitive_requests({.n = 24, .max_new = 90, .sample = sample}, D::vocab, 31 + sample);
    rs[3].speculate = false;  // a request may opt out
    const auto want = alone(m, rs);
    serve::EngineOptions opt{.max_batch = 8,
                             .max_batched_tokens = 64,
                             .speculative = {.k = 4, .rule = serve::SpecRule::always}};
    std::vector<serve::Result> got;
    auto s = run_and_compare<TestType, sched::Continuous>(m, rs, want, opt, &got);
    CHECK(s.spec_proposed > 0);
    CHECK(s.spec_accepted > 0);
    CHECK(s.spec_accepted <= s.spec_proposed);
    CHECK(s.spec_mean_length() > 1.0);
    long proposed = 0, accepted = 0;
    for (const auto& r : got)
      proposed += r.metrics.spec_proposed, accepted += r.metrics.spec_accepted;
    CHECK(proposed == s.spec_proposed);
    CHECK(accepted == s.spec_accepted);
    CHECK(got[3].metrics.spec_proposed == 0);
    // Fewer steps than tokens: each accepted proposal is a token without a step of its own.
    serve::EngineOptions off = opt;
    off.speculative.k = 0;
    auto plain = run_and_compare<TestType, sched::Continuous>(m, rs, want, off);
    CHECK(plain.spec_proposed == 0);
    CHECK(s.steps < plain.steps);
    {
      INFO("the cost rule: whatever the step times led it to propose, the same tokens");
      auto cost = opt;
      cost.speculative.rule = serve::SpecRule::cost;
      auto q = run_and_compare<TestType, sched::Continuous>(m, rs, want, cost);
      CHECK(q.spec_accepted <= q.spec_proposed);
      CHECK(q.spec_verifies + q.spec_declined > 0);  // the rule was asked
    }
    {
      INFO("one request at a time");
      auto q = run_and_compare<TestType, sched::Sequential<>>(m, rs, want, opt);
      CHECK(q.spec_accepted > 0);
    }
    {
      INFO("a static batch");
      auto q = run_and_compare<TestType, sched::Static>(m, rs, want, opt);
      CHECK(q.spec_accepted > 0);
    }
    {
      INFO("a budget of one step's own tokens: no room for proposals beyond it");
      auto tight = opt;
      tight.max_batched_tokens = 8;
      run_and_compare<TestType, sched::Continuous>(m, rs, want, tight);
    }
    if constexpr (std::is_same_v<TestType, Paged>) {
      INFO("a pool of one sequence: preemptions, evictions, prefix hits");
      auto small = opt;
      small.kv_blocks = 32;
      auto q = run_and_compare<Paged, sched::Continuous>(m, rs, want, small);
      CHECK(q.preemptions > 0);
      CHECK(q.spec_accepted > 0);
    }
  }
}

// A draft model proposes instead of the n-gram lookup: still the tokens of plain decoding. A
// draft with the target's own weights proposes what greedy decoding draws, so every proposal is
// accepted (which fails if a slot's rows are rewound wrongly after a rejection, a preemption
// or a request taking over another's slot); a smaller, different model is mostly rejected.
TEMPLATE_TEST_CASE("a draft model proposes: every request gets its tokens alone",
                   "[engine][spec][draft]", Contig, Paged) {
  using Twin = Contig;                                                     // the target's weights
  using Small = sk::Gpt2<sk::Config<sk::dims::Tiny<1, 2, 32, 512, 512>>>;  // its own
  static Twin twin = Twin::random(11);
  static Small small = Small::random(5);
  auto& m = model<TestType>();
  for (bool sample : {false, true}) {
    INFO((sample ? "seeded sampling" : "greedy"));
    auto rs =
        make_repetitive_requests({.n = 24, .max_new = 90, .sample = sample}, D::vocab, 41 + sample);
    rs[2].speculate = false;
    const auto want = alone(m, rs);
    serve::EngineOptions opt{.max_batch = 8,
                             .max_batched_tokens = 64,
                             .speculative = {.k = 4, .rule = serve::SpecRule::always}};
    {
      INFO("the target's twin drafting, 3 slots for 8 sequences: slots taken over");
      opt.speculative.draft = std::make_shared<serve::DraftModel<Twin>>(twin, 3);
      std::vector<serve::Result> got;
      auto s = run_and_compare<TestType, sched::Continuous>(m, rs, want, opt, &got);
      CHECK(s.spec_proposed > 0);
      if (!sample) CHECK(s.spec_accepted == s.spec_proposed);
      if (sample) CHECK(s.spec_accepted < s.spec_proposed);
      CHECK(got[2].metrics.spec_proposed == 0);
      auto off = opt;
      off.speculative = {};
      auto plain = run_and_compare<TestType, sched::Continuous>(m, rs, want, off);
      CHECK(s.steps < plain.steps);
    }
    {
      INFO("a smaller model drafting");
      opt.speculative.draft = std::make_shared<serve::DraftModel<Small>>(small, 8);
      auto s = run_and_compare<TestType, sched::Continuous>(m, rs, want, opt);
      CHECK(s.spec_proposed > 0);
      CHECK(s.spec_accepted < s.spec_proposed);
      INFO("the cost rule");
      opt.speculative.rule = serve::SpecRule::cost;
      auto q = run_and_compare<TestType, sched::Continuous>(m, rs, want, opt);
      CHECK(q.spec_verifies + q.spec_declined > 0);
      opt.speculative.rule = serve::SpecRule::always;
    }
    opt.speculative.draft = std::make_shared<serve::DraftModel<Twin>>(twin, 8);
    {
      INFO("one request at a time; a static batch");
      auto q = run_and_compare<TestType, sched::Sequential<>>(m, rs, want, opt);
      if (!sample) CHECK(q.spec_accepted == q.spec_proposed);
      run_and_compare<TestType, sched::Static>(m, rs, want, opt);
    }
    if constexpr (std::is_same_v<TestType, Paged>) {
      INFO("a pool of one sequence: preemptions, evictions, prefix hits");
      auto small_pool = opt;
      small_pool.kv_blocks = 32;
      auto q = run_and_compare<Paged, sched::Continuous>(m, rs, want, small_pool);
      CHECK(q.preemptions > 0);
      if (!sample) CHECK(q.spec_accepted == q.spec_proposed);
    }
  }
}

// What a slot held before (rejected proposals, another request's tokens) never shows: each
// call's proposals equal those of a draft that sees the tokens for the first time.
TEST_CASE("a draft's proposals depend on the tokens alone, not on what its slots held",
          "[spec][draft]") {
  using Small = sk::Gpt2<sk::Config<sk::dims::Tiny<1, 2, 32, 512, 512>>>;
  static Small small = Small::random(5);
  serve::DraftModel<Small> kept(small, 2);  // 2 slots for 3 sequences: taken over too
  std::mt19937_64 rng(7);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<std::vector<int32_t>> seqs(3);
  for (auto& t : seqs)
    for (int i = uni(1, 150); i > 0; i--) t.push_back(uni(0, 511));
  int rewinds = 0;
  for (int call = 0; call < 30; call++) {
    std::vector<std::vector<int32_t>> outs(2), fresh_outs(2);
    std::vector<serve::DraftAsk> asks;
    const int first = uni(0, 2), second = (first + uni(1, 2)) % 3;
    for (int q : {first, second})
      asks.push_back({.id = static_cast<uint64_t>(q), .tokens = seqs[q], .k = uni(1, 5)});
    for (int i = 0; i < 2; i++) asks[i].out = &outs[i];
    kept.propose(asks);
    serve::DraftModel<Small> fresh(small, 2);
    auto again = asks;
    for (int i = 0; i < 2; i++) again[i].out = &fresh_outs[i];
    fresh.propose(again);
    for (int i = 0; i < 2; i++) {
      INFO("call " << call << ", ask " << i);
      REQUIRE(outs[i].size() == static_cast<std::size_t>(asks[i].k));
      CHECK(outs[i] == fresh_outs[i]);
      // Its slot holds the tokens and every proposal but the last, nothing else.
      std::vector<int32_t> want(asks[i].tokens.begin(), asks[i].tokens.end());
      want.insert(want.end(), outs[i].begin(), outs[i].end() - 1);
      const auto held = kept.held(asks[i].id);
      CHECK(std::vector<int32_t>(held.begin(), held.end()) == want);
    }
    // As a verify would leave them: some proposals accepted, then a token of its own (and
    // tokens a grammar forced after it).
    for (int i = 0; i < 2; i++) {
      auto& t = seqs[i == 0 ? first : second];
      const int accepted = uni(0, static_cast<int>(outs[i].size()));
      t.insert(t.end(), outs[i].begin(), outs[i].begin() + accepted);
      rewinds += accepted < static_cast<int>(outs[i].size()) - 1;
      for (int j = uni(1, 3); j > 0; j--) t.push_back(uni(0, 511));
    }
  }
  CHECK(rewinds > 10);
  CHECK(kept.forwards() > 0);
}

TEST_CASE("a draft model must share the vocabulary and serves one engine",
          "[engine][spec][draft]") {
  auto& m = model<Paged>();
  using Other = sk::Gpt2<sk::Config<sk::dims::Tiny<1, 2, 32, 256, 64>>>;
  static Other other = Other::random(3);
  serve::EngineOptions o{.speculative = {.k = 2}};
  o.speculative.draft = std::make_shared<serve::DraftModel<Other>>(other, 2);
  REQUIRE_THROWS_WITH((serve::Engine<Paged, sched::Continuous>(m, tokenizer(), o)),
                      Contains("has 256 tokens in its vocabulary, the model 512"));
  static Contig twin = Contig::random(11);
  o.speculative.draft = std::make_shared<serve::DraftModel<Contig>>(twin, 2);
  {
    serve::Engine<Paged, sched::Continuous> a(m, tokenizer(), o);
    REQUIRE_THROWS_WITH((serve::Engine<Paged, sched::Continuous>(m, tokenizer(), o)),
                        Contains("the draft model is already in another engine"));
  }
  serve::Engine<Paged, sched::Continuous> b(m, tokenizer(), o);  // the first one let it go
  auto r = b.generate({.prompt_ids = {1, 2, 3, 1, 2, 3}, .stop = {.max_new_tokens = 8}});
  CHECK(r.finish_reason == "length");
  CHECK(r.tokens.size() == 8);
}

TEST_CASE("static batching runs each batch until its longest request ends",
          "[engine][invariance]") {
  // The course's workload: 32 requests in batches of 8, every 8th wants 100 tokens, the
  // others 10. Static: 4 batches x 100 steps. Continuous refills freed slots at once.
  auto& m = model<Contig>();
  auto rs = make_requests({.n = 32, .min_prompt = 8, .max_prompt = 24}, D::vocab, 4);
  for (int i = 0; i < 32; i++) rs[i].stop.max_new_tokens = i % 8 == 0 ? 100 : 10;
  serve::EngineOptions opt{.max_batch = 8};
  long static_steps, cont_steps;
  {
    serve::Engine<Contig, sched::Static> e(m, tokenizer(), opt);
    auto r = e.run_all(rs);
    for (auto& x : r) CHECK(x.finish_reason == "length");
    static_steps = e.stats().steps;
  }
  {
    serve::Engine<Contig, sched::Continuous> e(m, tokenizer(), opt);
    e.run_all(rs);
    cont_steps = e.stats().steps;
  }
  CHECK(static_steps == 400);
  CHECK(cont_steps < 160);
}

// With speculation too: a stop string or the end-of-text token inside a run of accepted
// proposals ends the request there, as it would without.
TEST_CASE("streamed pieces add up to the text; stop strings and EOS end a request in a batch",
          "[engine][spec]") {
  auto& m = model<Paged>();
  static Contig twin = Contig::random(11);  // a draft model: the target's weights
  for (int k : {0, 4, -4}) {
    INFO("speculative k = " << std::abs(k) << (k < 0 ? ", a draft model" : ""));
    auto rs = make_repetitive_requests({.n = 9, .max_new = 40}, D::vocab, 5);
    for (auto& r : rs) r.stop.max_new_tokens = 40;
    auto want = alone(m, rs);
    serve::EngineOptions opt{.max_batch = 4,
                             .speculative = {.k = std::abs(k), .rule = serve::SpecRule::always}};
    if (k < 0) opt.speculative.draft = std::make_shared<serve::DraftModel<Contig>>(twin, 4);
    serve::Engine<Paged, sched::Continuous> engine(m, tokenizer(), opt);
    std::vector<std::string> streamed(rs.size());
    for (std::size_t i = 0; i < rs.size(); i++) {
      rs[i].on_piece = [&streamed, i](std::string_view p, const serve::GeneratedToken&) {
        streamed[i] += p;
        return true;
      };
      if (i % 3 == 1) {
        const std::string& t = want[i].text;
        REQUIRE(t.size() > 8);
        rs[i].stop.stop_strings = {t.substr(t.size() / 2, 3)};
      } else if (i % 3 == 2) {  // a token it generates halfway becomes its end-of-text
        rs[i].stop.stop_at_eos = true;
        rs[i].stop.eos_id = want[i].tokens[20].id;
      }
    }
    auto got = engine.run_all(rs);
    for (std::size_t i = 0; i < rs.size(); i++) {
      INFO("request " << i);
      CHECK(streamed[i] == got[i].text);
      if (i % 3 == 1) {
        CHECK(got[i].finish_reason == "stop");
        CHECK(got[i].text == want[i].text.substr(0, want[i].text.find(rs[i].stop.stop_strings[0])));
      } else if (i % 3 == 2) {
        CHECK(got[i].finish_reason == "eos");
        const auto ids = want[i].ids();
        const auto end = std::find(ids.begin(), ids.end(), rs[i].stop.eos_id) + 1;
        CHECK(got[i].ids() == std::vector<int32_t>(ids.begin(), end));
      } else {
        CHECK(got[i].text == want[i].text);
      }
      CHECK(got[i].metrics.ttft_ms > 0);
      CHECK(got[i].metrics.e2e_ms >= got[i].metrics.ttft_ms);
      CHECK(got[i].metrics.gaps_ms.size() + 1 == got[i].tokens.size());
    }
    if (k != 0) CHECK(engine.stats().spec_accepted > 0);
  }
}

TEST_CASE("8 threads submit 400 requests and cancel some: each ends once, no block leaks",
          "[engine][threads]") {
  auto& m = model<Paged>();
  serve::EngineOptions opt{.max_batch = 8, .max_batched_tokens = 64, .kv_blocks = 48};
  serve::Engine<Paged, sched::Continuous> engine(m, tokenizer(), opt);
  const auto start = engine.stats();
  std::atomic<int> cancelled_asked{0};
  std::vector<std::vector<serve::RequestHandle>> handles(8);
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; t++)
    ts.emplace_back([&, t] {
      // Half the threads send prompts that share prefixes: their blocks are shared, cached,
      // evicted and taken back while others come and go.
      auto rs =
          t % 2
              ? make_shared_requests({.n = 50, .max_suffix = 20, .max_new = 40}, D::vocab, 100 + t)
              : make_requests({.n = 50, .max_prompt = 60, .max_new = 40}, D::vocab, 100 + t);
      std::mt19937 rng(t);
      for (auto& r : rs) {
        auto h = engine.submit(std::move(r));
        handles[t].push_back(h);
        if (rng() % 4 == 0) {
          if (rng() % 2) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
          engine.cancel(h.id);
          cancelled_asked++;
        }
      }
    });
  for (auto& t : ts) t.join();
  std::set<uint64_t> ids;
  int cancelled = 0;
  for (auto& hs : handles)
    for (auto& h : hs) {
      auto r = h.get();
      CHECK(r.id == h.id);
      CHECK(ids.insert(r.id).second);
      CHECK((r.finish_reason == "length" || r.finish_reason == "cancelled"));
      CHECK(r.error == "");
      if (r.finish_reason == "length")
        CHECK(r.tokens.size() == static_cast<std::size_t>(r.metrics.generated_tokens));
      cancelled += r.finish_reason == "cancelled";
    }
  CHECK(ids.size() == 400);
  CHECK(cancelled > 0);
  CHECK(cancelled <= cancelled_asked);
  engine.wait_idle();
  auto s = engine.stats();
  CHECK(s.finished == 400);
  CHECK(s.cache_blocks_free == start.cache_blocks_free);
  CHECK(s.slots_free == start.slots_free);
  CHECK(s.prefix_cache_hits > 0);
  CHECK(!engine.cancel(*ids.begin()));  // already ended
}

TEST_CASE("bad requests get clear errors and do not disturb running ones", "[engine]") {
  auto& m = model<Paged>();
  auto rs = make_requests(
      {.n = 3, .min_prompt = 20, .max_prompt = 40, .min_new = 60, .max_new = 80}, D::vocab, 6);
  auto want = alone(m, rs);
  serve::Engine<Paged, sched::Continuous> engine(m, tokenizer(), {.max_batch = 4, .kv_blocks = 64});
  std::vector<serve::RequestHandle> hs;
  for (auto& r : rs) hs.push_back(engine.submit(r));
  auto bad = [&](auto edit, const char* msg) {
    serve::Request r = rs[0];
    edit(r);
    REQUIRE_THROWS_WITH(engine.submit(r), Contains(msg));
  };
  bad([](serve::Request& r) { r.prompt_ids.clear(); }, "prompt is empty");
  bad([](serve::Request& r) { r.prompt_ids.assign(D::n_positions + 1, 1); },
      "513 tokens, more than n_positions = 512");
  bad(
      [](serve::Request& r) {
        r.prompt_ids.assign(500, 1);
        r.stop.max_new_tokens = 13;
      },
      "prompt's 500 tokens + max_new_tokens 13 = 513 is more than n_positions = 512");
  bad([](serve::Request& r) { r.prompt_ids[3] = D::vocab; }, "prompt token 3 has id 512");
  bad([](serve::Request& r) { r.prompt_ids[0] = -1; }, "outside the vocabulary");
  bad([](serve::Request& r) { r.stop.max_new_tokens = -1; }, "max_new_tokens must be >= 0");
  bad([](serve::Request& r) { r.sampling.temperature = -0.5f; }, "temperature");
  bad([](serve::Request& r) { r.sampling.temperature = INFINITY; }, "temperature");
  bad([](serve::Request& r) { r.sampling.top_p = 0.f; }, "top_p");
  bad([](serve::Request& r) { r.sampling.top_k = -2; }, "top_k");
  bad([](serve::Request& r) { r.adapter = "sql-lora"; }, "adapter 'sql-lora'");
  bad([](serve::Request& r) { r.top_logprobs = D::vocab + 1; }, "top_logprobs");
  // A callback that throws ends its own request with the error, nothing else.
  serve::Request thrower = rs[1];
  thrower.on_piece = [](std::string_view, const serve::GeneratedToken&) -> bool {
    throw std::runtime_error("client went away");
  };
  auto th = engine.submit(thrower);
  // max_new_tokens = 0: ends at once with no tokens.
  serve::Request none = rs[2];
  none.stop.max_new_tokens = 0;
  auto nr = engine.generate(none);
  CHECK(nr.finish_reason == "length");
  CHECK(nr.tokens.empty());
  // Exactly the context: accepted, and it runs to its length.
  serve::Request edge = rs[2];
  edge.prompt_ids.assign(500, 1);
  edge.stop.max_new_tokens = 12;
  auto er = engine.generate(edge);
  CHECK(er.finish_reason == "length");
  CHECK(er.tokens.size() == 12u);
  CHECK(th.get().finish_reason == "error");
  CHECK_THAT(th.get().error, Contains("client went away"));
  for (std::size_t i = 0; i < rs.size(); i++) check_same(want[i], hs[i].get(), i, true);
}

TEST_CASE("engine options out of range are refused, naming the option", "[engine]") {
  auto& m = model<Paged>();
  auto make = [&](serve::EngineOptions o) {
    serve::Engine<Paged, sched::Continuous> e(m, tokenizer(), o);
  };
  REQUIRE_THROWS_WITH(make({.max_batch = 0}), Contains("max_batch must be >= 1, got 0"));
  REQUIRE_THROWS_WITH(make({.kv_blocks = -3}), Contains("kv_blocks must be >= 0, got -3"));
  REQUIRE_THROWS_WITH(make({.prefix_cache_blocks = -2}),
                      Contains("prefix_cache_blocks must be >= 0 (-1: the pool's), got -2"));
  REQUIRE_THROWS_WITH(make({.speculative = {.k = -1}}),
                      Contains("speculative k must be in [0, 64] (0: off), got -1"));
  REQUIRE_THROWS_WITH(make({.speculative = {.k = 2, .ngram_max = 1, .ngram_min = 2}}),
                      Contains("1 <= ngram_min <= ngram_max, got 2 and 1"));
}

TEST_CASE("memory is sized before it is taken: a pool fits the limit, asking for more names why",
          "[engine][memory]") {
  using PE = serve::Engine<Paged, sched::Continuous>;
  using CE = serve::Engine<Contig, sched::Continuous>;
  const double token = 2.0 * D::n_layer * D::n_embd * sizeof(float), block = 16 * token;
  // Under the machine's memory, the default pool is max_batch full-length sequences.
  PE full(model<Paged>(), tokenizer(), {.max_batch = 4});
  const serve::MemoryPlan p = full.memory();
  CHECK(p.kv_blocks == 4 * 512 / 16);
  CHECK(full.stats().cache_blocks == p.kv_blocks);
  CHECK(p.kv_tokens == 4 * 512);
  CHECK(p.kv == p.kv_blocks * block);
  CHECK(p.workspace > 0);
  CHECK(p.total() <= p.limit);
  CHECK_THAT(p.limit_source, Contains("available"));
  // A limit with room for 40.5 blocks beside the step buffers: a pool of 40, and a request
  // needing 32 of them runs.
  const auto limit = [&](double blocks) {
    return static_cast<std::size_t>(p.workspace + blocks * block);
  };
  {
    PE e(model<Paged>(), tokenizer(), {.max_batch = 4, .memory_limit = limit(40.5)});
    CHECK(e.memory().kv_blocks == 40);
    CHECK(e.stats().cache_blocks == 40);
    CHECK_THAT(e.memory().limit_source, Contains("--memory-limit"));
    serve::Request r;
    r.prompt_ids.assign(500, 3);
    r.stop = {.max_new_tokens = 8, .stop_at_eos = false};
    CHECK(e.generate(r).tokens.size() == 8u);
  }
  // Too little for one full-length sequence, or more blocks asked for than fit: refused, naming
  // the sizes and the flag.
  REQUIRE_THROWS_WITH(PE(model<Paged>(), tokenizer(), {.max_batch = 4, .memory_limit = limit(20)}),
                      Contains("not even one 512-token sequence") && Contains("32 blocks") &&
                          Contains("--memory-limit") && Contains("step buffers"));
  REQUIRE_THROWS_WITH(PE(model<Paged>(), tokenizer(),
                         {.max_batch = 4, .kv_blocks = 100, .memory_limit = limit(40.5)}),
                      Contains("100 blocks (kv_blocks, --kv-blocks)") && Contains("at most 40"));
  // Contiguous: max_batch full-length rows, or an error naming --max-batch and what fits.
  CE three(model<Contig>(), tokenizer(), {.max_batch = 3});
  const double seq = 512 * token;
  REQUIRE_THROWS_WITH(
      CE(model<Contig>(), tokenizer(),
         {.max_batch = 3,
          .memory_limit = static_cast<std::size_t>(three.memory().workspace + 2.5 * seq)}),
      Contains("3 sequences (max_batch, --max-batch)") && Contains("at most 2") &&
          Contains("1.5 MiB"));
  // The default limit: a cache bigger than any machine is refused before it is allocated.
  REQUIRE_THROWS_WITH(
      CE(model<Contig>(), tokenizer(), {.max_batch = 1 << 30}),
      Contains("1073741824 sequences") && Contains("% of the") && Contains("available"));
}

TEST_CASE("an engine refuses a tokenizer with fewer tokens than the model", "[engine]") {
  auto& m = model<Paged>();
  const auto dir = std::filesystem::temp_directory_path() /
                   ("servekit_engine_small_vocab_" + std::to_string(::getpid()));
  sk::testing::write_gpt2_vocab_prefix(std::filesystem::path(SERVEKIT_DATA) / "gpt2", dir, 400);
  const auto small = sk::text::Gpt2Tokenizer::from_dir(dir);
  using E = serve::Engine<Paged, sched::Continuous>;
  REQUIRE_THROWS_WITH(
      E(m, small, {.max_batch = 2, .kv_blocks = 16}),
      Contains("engine") && Contains("has 400 tokens") && Contains("vocab_size is 512"));
  std::filesystem::remove_all(dir);
}
