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
// With priority scheduling (EngineOptions::priority_scheduling) the queues are in priority
// order, so "oldest" above reads "most urgent, then oldest", "newest" reads "least urgent, then
// newest", and a waiting request more urgent than a running one is admitted before that one is
// planned, preempting the least urgent running sequences when it finds no slot or blocks
// (vLLM's priority policy). A sequence preempted so recomputes later, its tokens unchanged.
// With max_active_adapters, at most that many distinct LoRA adapters run at once (LoRAX): a
// waiting request whose adapter would exceed the bound is passed over for the next one whose
// adapter is running (first come, first served within an adapter), and an adapter that has
// admitted for adapter_slice_steps while another waits for a place stops admitting and drains.
#include <algorithm>
#include <climits>
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
    Budget b{o.max_batched_tokens, 0};
    if (o.priority_scheduling) update_slices(c);
    for (std::size_t i = 0; i < c.running().size() && b.tokens > 0;) {
      // Priorities: a waiting request more urgent than the next running one is placed before
      // it, preempting the least urgent running sequences (not planned yet) if it must. It
      // joins running ahead of them, so the next one to plan moves one place on.
      if (o.priority_scheduling &&
          admit_one(c, out, b, Core<Cache>::priority(*c.running()[i]), true)) {
        i++;
        continue;
      }
      // A try that failed may still have preempted (its estimate of what they free is an
      // upper bound), from the back, s among them.
      if (i >= c.running().size()) break;
      Seq* s = c.running()[i];
      const int n = std::min(s->uncached(), b.tokens);
      int need = c.blocks_needed(*s, n);
      bool evicted = false;
      while (need > c.free_blocks() - b.promised) {
        Seq* victim = c.running().back();  // never planned yet: planning goes in running order
        c.preempt(victim);
        if (victim == s) {
          evicted = true;
          break;
        }
      }
      if (evicted) break;  // s was the last: nothing after it is left to plan
      out.push_back({s, n});
      if (n < s->uncached()) c.counters.chunked_prefills++;
      b.promised += need;
      b.tokens -= n;
      i++;
    }
    update_slices(c);
    while (b.tokens > 0 && admit_one(c, out, b, INT_MAX, false)) {
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
  struct Budget {
    int tokens;    // new tokens the step may still take
    int promised;  // blocks the planned work will take when the step reserves its rows
  };

  // Admits the next waiting request that may start now, if its priority is below `before`
  // (lower numbers first; INT_MAX: any), and plans its first chunk. With `preempt`, a request
  // that finds no slot or too few blocks takes them from the least urgent running sequences
  // while those are less urgent than it (they must not be planned yet), unless all of theirs
  // together would still be too few: then nobody is preempted for nothing. False: none was
  // admitted.
  template <class Cache>
  bool admit_one(Core<Cache>& c, std::vector<Work>& out, Budget& b, int before, bool preempt) {
    const EngineOptions& o = c.options();
    if (c.waiting().empty()) return false;
    const std::size_t wi = next_admissible(c);
    if (wi == c.waiting().size()) return false;
    Seq* w = c.waiting()[wi];
    const int prio = Core<Cache>::priority(*w);
    if (prio >= before) return false;
    bool could_fit = !preempt;  // known once it does not fit as things stand
    while (true) {
      // A cached prefix is mapped, not computed: it takes no budget, and its blocks no new
      // ones (but those nobody holds leave the free pool).
      const kv::PrefixHit hit = c.prefix_hit(*w);
      const int len = w->uncached() - hit.tokens;
      if (!o.chunked_prefill && len > b.tokens && !out.empty()) return false;
      const int n = o.chunked_prefill ? std::min(len, b.tokens) : len;
      const int need = c.blocks_needed(*w, hit.tokens + n) - hit.blocks + hit.evictable;
      const int keep = c.running().empty() ? 0 : c.watermark_blocks();
      const bool fits = c.free_slots() > 0 && static_cast<int>(c.running().size()) < o.max_batch &&
                        need <= c.free_blocks() - b.promised - keep;
      if (fits) {
        c.admit(wi);  // preempting put the victims after w: wi still names it
        if (w->adapter >= 0) since_.try_emplace(w->adapter, step_);
        out.push_back({w, n});
        if (n < len) c.counters.chunked_prefills++;
        b.promised += need;
        b.tokens -= n;
        return true;
      }
      if (!preempt || c.running().empty() || Core<Cache>::priority(*c.running().back()) <= prio)
        return false;
      if (!could_fit) {
        // What every less urgent running sequence gives back, at most.
        int slots = 0, blocks = 0;
        for (auto it = c.running().rbegin();
             it != c.running().rend() && Core<Cache>::priority(**it) > prio; ++it)
          slots++, blocks += c.blocks_held(**it);
        const int left = static_cast<int>(c.running().size()) - slots;
        could_fit = c.free_slots() + slots > 0 && left < o.max_batch &&
                    need <= c.free_blocks() + blocks - b.promised - (left > 0 ? keep : 0);
        if (!could_fit) return false;
      }
      c.preempt(c.running().back());
    }
  }

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
