// SPDX-License-Identifier: Apache-2.0
#pragma once
// The course's static batching: take up to max_batch waiting requests, prefill them together
// and decode them together until the longest one ends; only then take the next batch. On a
// contiguous cache the prompts are left-padded to the longest one (pads computed and stored,
// as HF's padded batch does) and a finished row keeps running to the end of its batch: the
// compute static batching wastes, and what continuous batching wins back. A paged cache needs
// no padding; its finished rows leave at once, but no new request joins a running batch.
#include <algorithm>
#include <string_view>
#include <vector>

#include "servekit/serve/sched/core.hpp"

namespace servekit::serve::sched {

struct Static {
  static constexpr std::string_view name = "static";

  template <class Cache>
  static constexpr bool keep_finished = !Core<Cache>::paged;

  template <class Cache>
  void plan(Core<Cache>& c, std::vector<Work>& out) {
    constexpr bool pad = !Core<Cache>::paged;
    const auto& run = c.running();
    auto leaving = [&](const Seq* s) { return c.leaving(s); };
    // A ghost that cannot take one more row (context or cache end) leaves early.
    for (Seq* s : run)
      if (s->ghost && (s->n_cached + 1 > c.n_positions() ||
                       s->row_offset + s->n_cached + 1 > c.cache().max_len()))
        c.retire(s);
    // Every row finished: the batch is over. The engine retires it and plans again.
    if (!run.empty() && std::all_of(run.begin(), run.end(), [](Seq* s) { return s->ghost; })) {
      for (Seq* s : run)
        if (!leaving(s)) c.retire(s);
      return;
    }
    if (run.empty()) {
      // A new batch. A static batch never preempts, so on a paged cache each request's whole
      // lifetime (prompt + max_new_tokens rows) must fit in the pool when it is admitted.
      // On a contiguous cache every row's pads + lifetime must fit in the slot's max_len.
      int avail = c.free_blocks(), t_pad = 0, longest_tail = 0;
      while (!c.waiting().empty() && static_cast<int>(run.size()) < c.options().max_batch &&
             c.free_slots() > 0) {
        const Seq& w = *c.waiting().front();
        const int need = lifetime_blocks(c, w);
        const int len = w.uncached(), tail = w.st->max_rows() - len;
        const int rows = std::max(t_pad, len) + std::max(longest_tail, tail);
        if (!run.empty() && (need > avail || (pad && rows > c.cache().max_len()))) break;
        avail -= need;
        t_pad = std::max(t_pad, len), longest_tail = std::max(longest_tail, tail);
        c.admit_front();
      }
      if (run.empty()) return;
      for (Seq* s : run) {
        const int len = s->uncached();
        if (pad) s->row_offset = t_pad - len;
        out.push_back({s, len, s->row_offset});
      }
      return;
    }
    for (Seq* s : run)
      if (!leaving(s)) out.push_back({s, s->ghost ? 1 : s->uncached()});
  }

 private:
  template <class Cache>
  static int lifetime_blocks(const Core<Cache>&, const Seq& s) {
    if constexpr (Core<Cache>::paged) {
      constexpr int B = Cache::B;
      return (s.st->max_rows() + B - 1) / B;
    } else {
      return 0;
    }
  }
};

}  // namespace servekit::serve::sched
