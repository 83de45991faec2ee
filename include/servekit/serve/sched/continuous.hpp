// SPDX-License-Identifier: Apache-2.0
#pragma once
// Continuous (iteration-level) batching, as Orca and vLLM do it. Every step:
//   1. each running sequence, oldest first, gets its next token (or the next chunk of a prompt
//      that did not fit in one step) within the step's token budget; on a paged cache, when
//      the pool cannot hold a sequence's next rows, the newest running sequence is preempted
//      (its blocks freed, requeued at the front, recomputed later) until it can;
//   2. waiting requests are admitted first come, first served while a slot, the token budget
//      and the pool (less a watermark kept for the running sequences' growth) allow; a prompt
//      longer than what is left of the budget is split (chunked prefill), so decodes are never
//      stalled behind a long prompt.
// Finished sequences leave at once, and their slot and blocks go to the next request.
#include <algorithm>
#include <string_view>
#include <vector>

#include "servekit/serve/sched/core.hpp"

namespace servekit::serve::sched {

struct Continuous {
  static constexpr std::string_view name = "continuous";
  template <class Cache>
  static constexpr bool keep_finished = false;

  template <class Cache>
  void plan(Core<Cache>& c, std::vector<Work>& out) {
    const EngineOptions& o = c.options();
    int budget = o.max_batched_tokens;
    int promised = 0;  // blocks the planned work will take when the step reserves its rows
    for (std::size_t i = 0; i < c.running.size() && budget > 0;) {
      Seq* s = c.running[i];
      const int n = std::min(s->uncached(), budget);
      int need = c.blocks_needed(*s, n);
      bool evicted = false;
      while (need > c.free_blocks() - promised) {
        Seq* victim = c.running.back();  // never planned yet: planning goes oldest first
        c.preempt(victim);
        if (victim == s) {
          evicted = true;
          break;
        }
      }
      if (evicted) break;  // s was the newest: nothing after it is left to plan
      out.push_back({s, n});
      if (n < s->uncached()) c.counters.chunked_prefills++;
      promised += need;
      budget -= n;
      i++;
    }
    while (!c.waiting.empty() && budget > 0 && c.free_slots() > 0 &&
           static_cast<int>(c.running.size()) < o.max_batch) {
      Seq* w = c.waiting.front();
      const int len = w->uncached();
      if (!o.chunked_prefill && len > budget && !out.empty()) break;
      const int n = o.chunked_prefill ? std::min(len, budget) : len;
      const int need = c.blocks_needed(*w, n);
      const int keep = c.running.empty() ? 0 : c.watermark_blocks();
      if (need > c.free_blocks() - promised - keep) break;
      c.admit_front();
      out.push_back({w, n});
      if (n < len) c.counters.chunked_prefills++;
      promised += need;
      budget -= n;
    }
  }
};

}  // namespace servekit::serve::sched
