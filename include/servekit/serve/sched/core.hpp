// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a scheduler sees and may change each step: the waiting queue, the running sequences,
// the cache's free slots and blocks. A scheduler (sched/sequential.hpp, static_batch.hpp,
// continuous.hpp, or one of the caller's: the Scheduler concept below) decides; it fills a plan
// of Work items and the engine executes it. Core owns the queues: a scheduler reads them and
// moves sequences only through admit, preempt and retire; the engine adds arrivals and removes
// what ended. Nothing here runs the model.
#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "servekit/kv/policy.hpp"
#include "servekit/kv/prefix_index.hpp"
#include "servekit/serve/completion.hpp"
#include "servekit/serve/ngram_proposer.hpp"
#include "servekit/serve/request_state.hpp"

namespace servekit::serve {

struct EngineOptions {
  int max_batch = 8;             // running sequences at most (= cache slots)
  int max_batched_tokens = 512;  // continuous: new tokens per step at most
  bool chunked_prefill = true;   // continuous: split a prompt over steps to fit that budget
  int kv_blocks = 0;  // paged: blocks in the pool; 0: as many as fit, up to max_batch full-length
  // bytes the KV cache, step buffers and adapter tiers may take (serve/memory_plan.hpp); 0:
  // 90% of the memory available when the engine starts (the host's, or the device's on Cuda)
  std::size_t memory_limit = 0;
  double watermark = 0.01;  // paged: share of blocks admission leaves free for decodes
  int32_t pad_id = -1;      // static batches' left padding; -1: the tokenizer's EOS
  // continuous: distinct LoRA adapters running at once (LoRAX's max_active_adapters); 0: any
  int max_active_adapters = 0;
  // continuous: steps an adapter keeps admitting new requests while requests for another
  // adapter wait for a place; then it drains, so no adapter starves
  int adapter_slice_steps = 32;
  // LoRA adapter tiers (lora/adapter_store.hpp, serve/adapter_slots.hpp), in bytes of A and B
  std::size_t adapter_device_bytes = std::size_t{1} << 30;  // the model's adapter slots
  std::size_t adapter_host_bytes = std::size_t{2} << 30;    // loaded adapters kept in memory
  int adapter_max_rank = 256;                               // higher ranks are refused
  bool adapter_paths = true;  // a request may name an adapter by its folder (LoRAX "local")
  // paged: a request maps the cached blocks of its prompt's longest known prefix instead of
  // computing them (kv/prefix_index.hpp), with schedulers that allow it (reuses_prefix)
  bool prefix_caching = true;
  int prefix_cache_blocks = -1;  // cached blocks nobody holds kept at most; -1: the pool's
  // device sampling: a constrained row's token mask is made while the step's forward runs on
  // the device, not before it is launched (off: before, as a baseline to compare with)
  bool late_masks = true;
  // constrained requests: the tokens a grammar forces are appended at once and fed in one step
  // (jump-forward, constrain/forced_tokens.hpp), with schedulers that allow it (feeds_chunks);
  // off: one step each, the same tokens
  bool jump_forward = true;
  // n-gram speculation (serve/ngram_proposer.hpp): decoding sequences propose up to k tokens,
  // verified in the same step; the tokens are those of plain decoding. k = 0: off
  Speculation speculative;
  // Request::priority orders the queues (lower first; first come, first served within a
  // priority), and the continuous scheduler preempts running sequences of a lower priority to
  // place a waiting one of a higher (vLLM's --scheduling-policy priority). Off: every request
  // has priority 0, and one that asks for another is refused.
  bool priority_scheduling = false;
};

// The logits rows a step can have: a row per sequence, and with speculation one per proposed
// token too, within the step's token budget.
inline int max_logit_rows(const EngineOptions& o) {
  const long rows = static_cast<long>(o.max_batch) * (1 + o.speculative.k);
  return static_cast<int>(std::min<long>(rows, o.max_batched_tokens));
}

// A request the engine holds, waiting or running.
struct Seq {
  std::unique_ptr<RequestState> st;
  std::shared_ptr<Completion> done = std::make_shared<Completion>();
  int slot = -1;           // cache slot while running
  int adapter = -1;        // the model's adapter slot, -1: the base model
  int n_cached = 0;        // tokens of st->tokens() whose keys and values are in the slot
  int row_offset = 0;      // left padding: cache rows before position 0 (static, contiguous)
  int32_t prefix_key = 0;  // its adapter's key in cached blocks' names (prefix caching)
  bool ghost = false;      // finished, but its row still runs to the end of its static batch
  bool cancel = false;     // asked to cancel; the engine ends it at the next step boundary
  // Speculation: tokens proposed after its last one, fed (and verified) in this step's work
  // after its one uncached token; empty outside a step.
  std::vector<int32_t> draft;
  SpecPace pace;  // how many it proposes, from how its proposals fared

  int uncached() const { return static_cast<int>(st->tokens().size()) - n_cached; }
};

// One sequence's share of a step: n_new of its uncached tokens (a ghost: one pad token), after
// `pad` left-padding tokens in its slot's rows 0..pad-1 when pad > 0. The engine adds a
// speculating sequence's draft to n_new after the scheduler's plan.
struct Work {
  Seq* seq;
  int n_new;
  int pad = 0;
};

struct Counters {
  long steps = 0, preemptions = 0, chunked_prefills = 0, finished = 0;
  long max_step_adapters = 0;  // the most distinct adapters one step has run
  long prompt_tokens = 0, generated_tokens = 0, padded_tokens = 0;
  // prefix caching, in tokens: those looked up at admission, those found cached (vLLM's
  // prefix_cache_queries / prefix_cache_hits)
  long prefix_queries = 0, prefix_hits = 0;
  // speculation: tokens proposed and accepted (vLLM's spec_decode_num_draft_tokens /
  // num_accepted_tokens), and the steps in which sequences verified a draft
  long spec_proposed = 0, spec_accepted = 0, spec_verifies = 0;
  long spec_declined = 0;  // a sequence's proposals kept out of a step by the cost rule
  long forced_tokens = 0;  // jump-forward: tokens appended without a step of their own
};

template <class Cache>
class Core {
 public:
  static constexpr bool paged = requires(const Cache& c) { c.free_blocks(); };

  Core(Cache& cache, const EngineOptions& opt, int n_positions)
      : cache_(cache), opt_(opt), n_positions_(n_positions) {}

  Counters counters;

  // Both queues are in priority order (Request::priority, lower first; all 0 unless
  // EngineOptions::priority_scheduling), and within a priority: waiting first come, first
  // served with the preempted first; running in admission order.
  const std::deque<Seq*>& waiting() const { return waiting_; }
  const std::vector<Seq*>& running() const { return running_; }
  static int priority(const Seq& s) { return s.st->request().priority; }
  const std::vector<Seq*>& retiring() const { return retiring_; }

  const EngineOptions& options() const { return opt_; }
  int n_positions() const { return n_positions_; }
  Cache& cache() { return cache_; }
  int free_slots() const { return cache_.free_slots(); }

  // Blocks of B tokens the pool has free; a contiguous cache has no blocks to run out of.
  int free_blocks() const {
    if constexpr (paged)
      return cache_.free_blocks();
    else
      return INT_MAX;
  }
  // Extra blocks s needs to hold n_new more tokens (0 on a contiguous cache).
  int blocks_needed(const Seq& s, int n_new) const {
    if constexpr (paged) {
      constexpr int B = Cache::B;
      const int rows = s.row_offset + s.n_cached + n_new;
      const int held = s.slot >= 0 ? cache_.blocks_held(s.slot) : 0;
      return std::max(0, (rows + B - 1) / B - held);
    } else {
      return 0;
    }
  }
  // Blocks s holds in the pool (0 on a contiguous cache); preempting s frees at most these (a
  // block another sequence maps stays).
  int blocks_held(const Seq& s) const {
    if constexpr (paged)
      return s.slot >= 0 ? cache_.blocks_held(s.slot) : 0;
    else
      return 0;
  }
  // Blocks admission keeps free for running sequences' next tokens (vLLM's watermark).
  int watermark_blocks() const {
    if constexpr (paged)
      return static_cast<int>(opt_.watermark * cache_.n_blocks() + 0.999);
    else
      return 0;
  }

  // Prefix caching (a paged cache with it enabled; the engine decides): admit maps the longest
  // cached run of the sequence's full blocks into its slot, so uncached() may be smaller after
  // admission than before. prefix_hit says by how much, before admitting.
  void use_prefix_cache(bool on) {
    if constexpr (paged) prefix_ = on && cache_.prefix_cache();
  }
  bool prefix_caching() const { return prefix_; }
  kv::PrefixHit prefix_hit(const Seq& s) const {
    if constexpr (paged) {
      if (!may_hit(s)) return {};
      const auto& t = s.st->tokens();
      return cache_.lookup(t, cache_.find_adapter_key(adapter_id(s)), last_reusable(t.size()));
    } else {
      return {};
    }
  }
  // Whether s may map cached blocks: not when every prompt position needs its logits.
  bool may_hit(const Seq& s) const { return prefix_ && !s.st->wants_prompt_logprobs(); }
  // The engine's side: s's rows up to n_cached are written; its full blocks get their names.
  void wrote(const Seq& s) {
    if constexpr (paged)
      if (prefix_ && !s.ghost)
        cache_.publish(s.slot, std::span(s.st->tokens()).first(s.n_cached), s.prefix_key);
  }

  // Moves the front waiting sequence to running with a fresh slot.
  Seq* admit_front() { return admit(0); }
  // Moves waiting[i] to running with a fresh slot.
  Seq* admit(std::size_t i) {
    Seq* s = waiting_[i];
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
    s->slot = cache_.acquire();
    s->n_cached = 0;
    s->row_offset = 0;
    if constexpr (paged)
      if (prefix_) {
        const auto& t = s->st->tokens();
        s->prefix_key = cache_.adapter_key(adapter_id(*s));
        if (may_hit(*s)) {
          s->n_cached = cache_.map_prefix(s->slot, t, s->prefix_key, last_reusable(t.size()));
          counters.prefix_queries += static_cast<long>(t.size());
          counters.prefix_hits += s->n_cached;
        }
        s->st->prefix_cached(s->n_cached);
      }
    s->st->scheduled();
    auto at = running_.end();  // after the last of its priority or a higher one
    while (at != running_.begin() && priority(**(at - 1)) > priority(*s)) --at;
    running_.insert(at, s);
    return s;
  }
  // A finished ghost the scheduler lets go: the engine retires it after planning.
  void retire(Seq* s) {
    if (std::find(retiring_.begin(), retiring_.end(), s) == retiring_.end()) retiring_.push_back(s);
  }
  bool leaving(const Seq* s) const {
    return std::find(retiring_.begin(), retiring_.end(), s) != retiring_.end();
  }

  // Takes s's slot and blocks back and requeues it first of its priority; it will recompute prompt
  // + tokens so far (vLLM's preemption by recompute). Its random stream is keyed by token index, so
  // a seeded request draws the same tokens after it.
  void preempt(Seq* s) {
    release(s);
    running_.erase(std::find(running_.begin(), running_.end(), s));
    s->st->preempted();
    counters.preemptions++;
    auto at = waiting_.begin();
    while (at != waiting_.end() && priority(**at) < priority(*s)) ++at;
    waiting_.insert(at, s);
  }

  // The engine's side. A new (or placed) request joins the back of its priority.
  void enqueue(Seq* s) {
    auto at = waiting_.end();
    while (at != waiting_.begin() && priority(**(at - 1)) > priority(*s)) --at;
    waiting_.insert(at, s);
  }
  // The ghosts let go this step, handed to the engine to retire.
  std::vector<Seq*> take_retiring() { return std::exchange(retiring_, {}); }
  // s has ended: its slot and blocks back to the pool, and out of every queue.
  void remove(Seq* s) {
    release(s);
    std::erase(running_, s);
    std::erase(waiting_, s);
  }

 private:
  static std::string_view adapter_id(const Seq& s) {
    const auto& a = s.st->request().adapter;
    return a ? std::string_view(*a) : std::string_view();
  }
  // A sequence computes at least its last token, whose logits it needs.
  static int last_reusable(std::size_t n) { return static_cast<int>(n) - 1; }

  void release(Seq* s) {
    if (s->slot >= 0) cache_.release(s->slot);
    s->slot = -1;
    s->n_cached = 0;
    s->draft.clear();
  }

  std::deque<Seq*> waiting_;
  std::vector<Seq*> running_;
  std::vector<Seq*> retiring_;
  Cache& cache_;
  const EngineOptions& opt_;
  int n_positions_;
  bool prefix_ = false;
};

// A scheduler's contract with the engine, for a cache type Cache. Each step the engine calls
// plan(core, out) with `out` empty; the scheduler appends one Work per sequence that runs this
// step (a sequence at most once; n_new of its uncached tokens, 1 <= n_new <= uncached(), or one
// pad token for a ghost), in the order the model should see them. It may admit waiting
// sequences, preempt running ones and let ghosts go (Core's operations), and must leave every
// planned sequence running with its rows within the cache's and n_positions' bounds; the engine
// reserves those rows, runs the step, and then retires what the scheduler let go and what
// finished. An empty plan while sequences wait and none run is a scheduler bug, which the
// engine reports on the oldest request. name: printed in every log and benchmark line.
// keep_finished<Cache> (optional, default false): a finished sequence stays in running as a
// ghost, feeding a pad token each step, until the scheduler retires it (a static batch's rows).
template <class S, class Cache>
concept SchedulerFor = requires(S& s, Core<Cache>& core, std::vector<Work>& out) {
  { S::name } -> std::convertible_to<std::string_view>;
  s.plan(core, out);
};

// reuses_prefix<Cache> (optional, default false): the scheduler sizes a sequence's work after
// admitting it, or from Core::prefix_hit, so the engine may turn prefix caching on (admission
// then maps cached blocks, and uncached() shrinks).
template <class S, class Cache>
constexpr bool reuses_prefix() {
  if constexpr (requires { S::template reuses_prefix<Cache>; })
    return S::template reuses_prefix<Cache>;
  else
    return false;
}

// feeds_chunks<Cache> (optional, default reuses_prefix<Cache>): the scheduler plans a running
// sequence's work from its uncached() tokens however many there are, so the engine may append
// several tokens at once (jump-forward).
template <class S, class Cache>
constexpr bool feeds_chunks() {
  if constexpr (requires { S::template feeds_chunks<Cache>; })
    return S::template feeds_chunks<Cache>;
  else
    return reuses_prefix<S, Cache>();
}

template <class S, class Cache>
constexpr bool keeps_finished() {
  if constexpr (requires { S::template keep_finished<Cache>; })
    return S::template keep_finished<Cache>;
  else
    return false;
}

// What every scheduler must offer whatever the cache: a name (Engine checks SchedulerFor).
template <class S>
concept Scheduler = requires {
  { S::name } -> std::convertible_to<std::string_view>;
};

}  // namespace servekit::serve
