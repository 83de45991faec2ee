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
//      stalled behind a long prompt. With prefix caching, a request's cached prefix is mapped
//      at admission and only the rest is computed.
// Finished sequences leave at once, and their slot and blocks go to the next request.
// With max_active_adapters, at most that many distinct LoRA adapters run at once (LoRAX): a
// waiting request whose adapter would exceed the bound is passed over for the next one whose
// adapter is running (first come, first served within an adapter), and an adapter that has
// admitted for adapter_slice_steps while another waits for a place stops admitting and drains.
#include <algorithm>
#include <map>
#include <string_view>
#include <vector>

#include "servekit/serve/sched/core.hpp"

namespace servekit::serve::sched {

struct Continuous {
  static constexpr std::string_view name = "continuous";
  template <class Cache>
  static constexpr bool keep_finished = false;
  template <class Cache>
  static constexpr bool reuses_prefix = true;

  template <class Cache>
  void plan(Core<Cache>& c, std::vector<Work>& out) {
    const EngineOptions& o = c.options();
    int budget = o.max_batched_tokens;
    int promised = 0;  // blocks the planned work will take when the step reserves its rows
    for (std::size_t i = 0; i < c.running().size() && budget > 0;) {
      Seq* s = c.running()[i];
      const int n = std::min(s->uncached(), budget);
      int need = c.blocks_needed(*s, n);
      bool evicted = false;
      while (need > c.free_blocks() - promised) {
        Seq* victim = c.running().back();  // never planned yet: planning goes oldest first
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
    update_slices(c);
    while (!c.waiting().empty() && budget > 0 && c.free_slots() > 0 &&
           static_cast<int>(c.running().size()) < o.max_batch) {
      const std::size_t wi = next_admissible(c);
      if (wi == c.waiting().size()) break;
      Seq* w = c.waiting()[wi];
      // A cached prefix is mapped, not computed: it takes no budget, and its blocks no new
      // ones (but those nobody holds leave the free pool).
      const kv::PrefixHit hit = c.prefix_hit(*w);
      const int len = w->uncached() - hit.tokens;
      if (!o.chunked_prefill && len > budget && !out.empty()) break;
      const int n = o.chunked_prefill ? std::min(len, budget) : len;
      const int need = c.blocks_needed(*w, hit.tokens + n) - hit.blocks + hit.evictable;
      const int keep = c.running().empty() ? 0 : c.watermark_blocks();
      if (need > c.free_blocks() - promised - keep) break;
      c.admit(wi);
      if (w->adapter >= 0) since_.try_emplace(w->adapter, step_);
      out.push_back({w, n});
      if (n < len) c.counters.chunked_prefills++;
      promised += need;
      budget -= n;
    }
    std::vector<int> used;
    for (const Work& w : out)
      if (w.seq->adapter >= 0 && std::find(used.begin(), used.end(), w.seq->adapter) == used.end())
        used.push_back(w.seq->adapter);
    c.counters.max_step_adapters =
        std::max<long>(c.counters.max_step_adapters, static_cast<long>(used.size()));
    step_++;
  }

 private:
  template <class Cache>
  static std::vector<int> running_adapters(const Core<Cache>& c) {
    std::vector<int> a;
    for (const Seq* s : c.running())
      if (s->adapter >= 0 && std::find(a.begin(), a.end(), s->adapter) == a.end())
        a.push_back(s->adapter);
    return a;
  }
  // Forgets adapters that no longer run; an adapter's slice starts when it starts running.
  template <class Cache>
  void update_slices(const Core<Cache>& c) {
    const auto run = running_adapters(c);
    std::erase_if(since_, [&](const auto& kv) {
      return std::find(run.begin(), run.end(), kv.first) == run.end();
    });
  }
  // The first waiting request that may start now under the adapter bound (waiting.size():
  // none). Without a bound that is always the front: plain FCFS.
  template <class Cache>
  std::size_t next_admissible(const Core<Cache>& c) const {
    const int bound = c.options().max_active_adapters;
    if (bound <= 0) return 0;
    const auto run = running_adapters(c);
    auto is_running = [&](int a) { return std::find(run.begin(), run.end(), a) != run.end(); };
    // Does a request wait for an adapter that cannot get a place? Then running adapters whose
    // slice is over stop admitting.
    bool someone_shut_out = false;
    if (static_cast<int>(run.size()) >= bound)
      for (const Seq* w : c.waiting())
        someone_shut_out |= w->adapter >= 0 && !is_running(w->adapter);
    for (std::size_t i = 0; i < c.waiting().size(); i++) {
      const int a = c.waiting()[i]->adapter;
      if (a < 0) return i;  // the base model takes no adapter place
      if (!is_running(a)) {
        if (static_cast<int>(run.size()) < bound) return i;
        continue;
      }
      auto it = since_.find(a);
      const bool slice_over =
          it != since_.end() && step_ - it->second >= c.options().adapter_slice_steps;
      if (someone_shut_out && slice_over) continue;
      return i;
    }
    return c.waiting().size();
  }

  long step_ = 0;
  std::map<int, long> since_;  // running adapter -> step it started running
};

}  // namespace servekit::serve::sched
