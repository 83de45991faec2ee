// SPDX-License-Identifier: Apache-2.0
#pragma once
// One request at a time, to the end: lesson 1's two baselines. With the KV cache a step feeds
// only the newest token; without it every step recomputes the whole sequence.
#include <string_view>
#include <vector>

#include "servekit/serve/sched/core.hpp"

namespace servekit::serve::sched {

struct KvCache {
  static constexpr bool use_cache = true;
};
struct NoCache {
  static constexpr bool use_cache = false;
};

template <class Mode = KvCache>
struct Sequential {
  static constexpr std::string_view name = Mode::use_cache ? "sequential" : "sequential-nocache";
  template <class Cache>
  static constexpr bool keep_finished = false;
  template <class Cache>
  static constexpr bool reuses_prefix = Mode::use_cache;  // without a cache, nothing to reuse

  template <class Cache>
  void plan(Core<Cache>& c, std::vector<Work>& out) {
    if (c.running().empty()) {
      if (c.waiting().empty()) return;
      c.admit_front();
    }
    Seq* s = c.running().front();
    if constexpr (!Mode::use_cache) s->n_cached = 0;  // its rows are rewritten, same blocks
    out.push_back({s, s->uncached()});
  }
};

}  // namespace servekit::serve::sched
