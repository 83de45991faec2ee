// SPDX-License-Identifier: Apache-2.0
#pragma once
// What an engine gives back: a handle per request, and snapshots of its counters.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "servekit/lora/adapter_store.hpp"
#include "servekit/serve/adapter_slots.hpp"
#include "servekit/serve/completion.hpp"
#include "servekit/serve/sched/core.hpp"

namespace servekit::serve {

// What submit() gives back. Copies share one result.
struct RequestHandle {
  uint64_t id = 0;
  std::shared_ptr<const Completion> done;
  Result get() const { return done->wait(); }  // blocks until the request has ended
  bool ready() const { return done->ready(); }
};

// The adapter tiers' counters (LoRA engines).
struct AdapterStats {
  lora::StoreCounters host;  // disk -> host loads, host-tier hits, misses and evictions
  SlotCounters device;       // host -> device uploads, device-tier hits, misses and evictions
  long parked = 0;           // requests waiting for their adapter to load or find room
};

// A snapshot of the engine's counters.
struct EngineStats {
  long waiting = 0, running = 0;
  long steps = 0, finished = 0, preemptions = 0, chunked_prefills = 0;
  long max_step_adapters = 0;  // the most distinct LoRA adapters one step has run
  long prompt_tokens = 0, generated_tokens = 0, padded_tokens = 0;
  int cache_blocks = 0, cache_blocks_free = 0;  // paged; 0 on a contiguous cache
  int cache_blocks_cached = 0;  // paged: blocks named in the prefix cache (free ones included)
  bool prefix_caching = false;
  long prefix_cache_queries = 0, prefix_cache_hits = 0;  // prompt tokens looked up / found
  // speculation: tokens proposed, accepted, and the sequence-steps that verified a draft
  long spec_proposed = 0, spec_accepted = 0, spec_verifies = 0;
  long spec_declined = 0;  // times a sequence the pace let propose did not: its rows would
                           // cost more than they save (SpecRule::cost; asked before the lookup)
  long forced_tokens = 0;  // jump-forward: tokens a grammar forced, appended without a step
  int slots = 0, slots_free = 0;
  double busy_s = 0;  // time spent in steps
  // Speculating engines, once learnt: a decode step's seconds = step_a_s + step_b_s * rows
  // (serve/step_cost.hpp); 0 and 0 before.
  double step_a_s = 0, step_b_s = 0;
  AdapterStats adapters;
  // LoRA: the adapters of the running and of the waiting requests, each named once
  std::vector<std::string> running_adapters, waiting_adapters;
  double tokens_per_s() const { return busy_s > 0 ? generated_tokens / busy_s : 0.0; }
  double prefix_hit_rate() const {
    return prefix_cache_queries > 0 ? double(prefix_cache_hits) / prefix_cache_queries : 0.0;
  }
  double spec_acceptance() const {
    return spec_proposed > 0 ? double(spec_accepted) / spec_proposed : 0.0;
  }
  // Tokens a verifying sequence gained per step: 1 + accepted / verifies (vLLM's mean
  // acceptance length).
  double spec_mean_length() const {
    return spec_verifies > 0 ? 1.0 + double(spec_accepted) / spec_verifies : 0.0;
  }
};

// The scheduler's queues and counters and the cache's pool, as a snapshot (the adapter tiers'
// part: AdapterParking::add_stats).
template <class Cache>
EngineStats snapshot(const Core<Cache>& core, const Cache& cache, double busy_s) {
  EngineStats s;
  s.waiting = static_cast<long>(core.waiting().size());
  s.running = static_cast<long>(core.running().size());
  const Counters& c = core.counters;
  s.steps = c.steps, s.finished = c.finished, s.preemptions = c.preemptions;
  s.max_step_adapters = c.max_step_adapters;
  s.chunked_prefills = c.chunked_prefills, s.prompt_tokens = c.prompt_tokens;
  s.generated_tokens = c.generated_tokens, s.padded_tokens = c.padded_tokens;
  s.prefix_caching = core.prefix_caching();
  s.prefix_cache_queries = c.prefix_queries, s.prefix_cache_hits = c.prefix_hits;
  s.spec_proposed = c.spec_proposed, s.spec_accepted = c.spec_accepted;
  s.spec_verifies = c.spec_verifies, s.spec_declined = c.spec_declined;
  s.forced_tokens = c.forced_tokens;
  if constexpr (Core<Cache>::paged) {
    s.cache_blocks = cache.n_blocks();
    s.cache_blocks_free = cache.free_blocks();
    s.cache_blocks_cached = cache.cached_blocks();
  }
  s.slots = cache.slots(), s.slots_free = cache.free_slots();
  s.busy_s = busy_s;
  return s;
}

}  // namespace servekit::serve
