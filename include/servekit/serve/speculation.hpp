// SPDX-License-Identifier: Apache-2.0
#pragma once
// Speculative decoding in the engine's step, as two halves around the forward pass:
//   add_drafts  after the scheduler's plan: decoding sequences propose tokens (n-gram lookup,
//               serve/ngram_proposer.hpp, or a draft model, serve/draft_model.hpp) that ride in
//               the same step as rows after their own;
//   verify      after the step: a sequence's rows are fed to its request in order while the
//               token drawn equals the one proposed.
// Each row's token is drawn exactly as a plain decode step would draw it (the same logits, which
// are batch- and chunk-invariant, and the same philox draw, numbered by token), and a row counts
// only when the token before it was the one proposed. So a request's tokens and logprobs are
// plain decoding's, greedy or seeded; speculation changes only how many a step yields. (The
// rejection sampling of Leviathan et al. accepts more, but changes the tokens.)
//
//   plan:   [A: t]          [B: t | d1 d2 d3]          [C: prompt chunk]
//   verify: A draws 1       B draws x1 == d1, x2 == d2, x3 != d3: 3 tokens, d3's row dropped
#include <algorithm>
#include <exception>
#include <vector>

#include "servekit/serve/draft_model.hpp"
#include "servekit/serve/ngram_proposer.hpp"
#include "servekit/serve/sched/core.hpp"
#include "servekit/serve/step_cost.hpp"

namespace servekit::serve {

// Gives the decoding sequences of `plan`, oldest first, drafts of up to k tokens from what is
// left of the step's token budget and, on a paged cache, of its free blocks, so that a draft
// never displaces a sequence's own token nor preempts one; schedulers know nothing of it.
// max_len: the cache's rows per sequence. device_sampling: the device picks tokens under masks
// made before the step, so constrained requests (whose later masks depend on the tokens
// accepted) do not speculate there.
// Each sequence proposes what its SpecPace allows, so a request whose proposals keep failing
// stops paying rows for them; under SpecRule::cost, only when its acceptance rate makes the
// step's time per token fall by `cost`'s line (rows so far R, tokens expected T: a sequence's
// rows add b per row and rate per row in tokens), so a batch large enough that rows cost what
// they save stops speculating, and starts again as it shrinks.
template <class Cache>
void add_drafts(std::vector<Work>& plan, Core<Cache>& core, const Speculation& sp,
                const StepCost& cost, int max_batched_tokens, int max_len, bool device_sampling) {
  for (Work& w : plan) w.seq->draft.clear();
  if (!sp.on()) return;
  int budget = max_batched_tokens, blocks = core.free_blocks();
  double rows = 0, tokens = 0;
  for (const Work& w : plan) {
    if (w.pad > 0) return;  // a static batch's first step: all prompts
    budget -= w.n_new;
    blocks -= core.blocks_needed(*w.seq, w.n_new);
    rows += w.n_new;
    tokens += !w.seq->ghost && w.seq->uncached() == w.n_new;  // it draws a token this step
  }
  std::vector<DraftAsk> asks;  // a draft model's, run for all of them at once after the loop
  std::vector<Work*> asking;
  for (Work& w : plan) {
    if (budget <= 0) break;
    Seq* s = w.seq;
    if (s->ghost || w.n_new != 1 || s->uncached() != 1) continue;  // not a decode row
    const RequestState& st = *s->st;
    if (!st.request().speculate || (device_sampling && st.constraint())) continue;
    // At most the tokens it may still generate after this one, within its rows.
    const int left = std::min(st.request().stop.max_new_tokens - st.generated() - 1,
                              std::min(st.max_rows(), max_len) - s->n_cached - 1);
    if (left <= 0) continue;
    const int k = std::min({s->pace.allowance(sp.k), budget, left});
    if (k <= 0) continue;
    if (sp.rule == SpecRule::cost && !cost.drafting_pays(s->pace.rate, rows, tokens)) {
      core.counters.spec_declined++;
      s->pace.declined();
      continue;
    }
    // The proposals the free blocks hold (a draft model's, asked for that many).
    int d = k, extra = 0;
    if (!sp.draft) {
      propose_ngram(st.tokens(), sp, k, s->draft);
      d = static_cast<int>(s->draft.size());
    }
    while (d > 0 && (extra = core.blocks_needed(*s, 1 + d) - core.blocks_needed(*s, 1)) > blocks)
      d--;
    if (sp.draft && d > 0) {
      asks.push_back({.id = st.id(), .tokens = st.tokens(), .k = d, .out = &s->draft});
      asking.push_back(&w);
    } else if (!sp.draft) {
      s->draft.resize(d);
    }
    w.n_new += d;
    budget -= d;
    rows += d, tokens += s->pace.rate * d;
    blocks -= d > 0 ? extra : 0;
  }
  if (asks.empty()) return;
  try {
    sp.draft->propose(asks);
  } catch (const std::exception&) {
    // A draft that fails costs this step's proposals, never a request: its slots start over.
    for (DraftAsk& a : asks) a.out->clear(), sp.draft->forget(a.id);
  }
  for (Work* w : asking) w->n_new = 1 + static_cast<int>(w->seq->draft.size());
}

// Feeds s's rows r, r + 1, ... (its last token's, then one after each proposed token) to its
// request through feed(s, row), which draws the token and returns whether the request finished,
// while the token drawn is the one proposed. The rows after the first mismatch are dropped:
// their cache rows lie beyond n_cached, and later steps write over them. Returns whether the
// request finished.
template <class Cache, class Feed>
bool verify(Seq* s, int r, int k_max, Core<Cache>& core, Feed&& feed) {
  const int d = static_cast<int>(s->draft.size());
  int fed = 0, accepted = 0;
  bool done = false;
  while (!done) {
    done = feed(s, r + fed);
    const bool match = fed < d && s->st->tokens().back() == s->draft[fed];
    fed++;
    accepted += match;
    if (!match) break;
  }
  s->n_cached += fed;  // its last token and the accepted proposals
  s->pace.verified(d, accepted, k_max);
  s->st->speculated(d, accepted);
  core.counters.spec_proposed += d;
  core.counters.spec_accepted += accepted;
  core.counters.spec_verifies++;
  s->draft.clear();
  core.wrote(*s);
  return done;
}

}  // namespace servekit::serve
