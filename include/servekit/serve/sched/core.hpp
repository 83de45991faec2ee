// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a scheduler sees and may change each step: the waiting queue, the running sequences,
// the cache's free slots and blocks. A scheduler (sched/sequential.hpp, static_batch.hpp,
// continuous.hpp) decides; it fills a plan of Work items and the engine executes it. Nothing
// here runs the model.
#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string_view>
#include <vector>

#include "servekit/kv/policy.hpp"
#include "servekit/serve/completion.hpp"
#include "servekit/serve/request_state.hpp"

namespace servekit::serve {

struct EngineOptions {
  int max_batch = 8;             // running sequences at most (= cache slots)
  int max_batched_tokens = 512;  // continuous: new tokens per step at most
  bool chunked_prefill = true;   // continuous: split a prompt over steps to fit that budget
  int kv_blocks = 0;             // paged: blocks in the pool; 0: max_batch full-length sequences
  double watermark = 0.01;       // paged: share of blocks admission leaves free for decodes
  int32_t pad_id = -1;           // static batches' left padding; -1: the tokenizer's EOS
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
};

// A request the engine holds, waiting or running.
struct Seq {
  std::unique_ptr<RequestState> st;
  std::shared_ptr<Completion> done = std::make_shared<Completion>();
  int slot = -1;        // cache slot while running
  int adapter = -1;     // the model's adapter slot, -1: the base model
  int n_cached = 0;     // tokens of st->tokens() whose keys and values are in the slot
  int row_offset = 0;   // left padding: cache rows before position 0 (static, contiguous)
  bool ghost = false;   // finished, but its row still runs to the end of its static batch
  bool cancel = false;  // asked to cancel; the engine ends it at the next step boundary

  int uncached() const { return static_cast<int>(st->tokens().size()) - n_cached; }
};

// One sequence's share of a step: n_new of its uncached tokens (a ghost: one pad token), after
// `pad` left-padding tokens in its slot's rows 0..pad-1 when pad > 0.
struct Work {
  Seq* seq;
  int n_new;
  int pad = 0;
};

struct Counters {
  long steps = 0, preemptions = 0, chunked_prefills = 0, finished = 0;
  long max_step_adapters = 0;  // the most distinct adapters one step has run
  long prompt_tokens = 0, generated_tokens = 0, padded_tokens = 0;
};

template <class Cache>
class Core {
 public:
  static constexpr bool paged = requires(const Cache& c) { c.free_blocks(); };

  Core(Cache& cache, const EngineOptions& opt, int n_positions)
      : cache_(cache), opt_(opt), n_positions_(n_positions) {}

  std::deque<Seq*> waiting;    // FCFS; a preempted sequence goes back to the front
  std::vector<Seq*> running;   // in admission order: the newest is preempted first
  std::vector<Seq*> retiring;  // finished ghosts the scheduler lets go: the engine retires them
  Counters counters;

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
  // Blocks admission keeps free for running sequences' next tokens (vLLM's watermark).
  int watermark_blocks() const {
    if constexpr (paged)
      return static_cast<int>(opt_.watermark * cache_.n_blocks() + 0.999);
    else
      return 0;
  }

  // Moves the front waiting sequence to running with a fresh slot.
  Seq* admit_front() { return admit(0); }
  // Moves waiting[i] to running with a fresh slot.
  Seq* admit(std::size_t i) {
    Seq* s = waiting[i];
    waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(i));
    s->slot = cache_.acquire();
    s->n_cached = 0;
    s->row_offset = 0;
    s->st->scheduled();
    running.push_back(s);
    return s;
  }

  // Takes s's slot and blocks back and requeues it at the front; it will recompute prompt +
  // tokens so far (vLLM's preemption by recompute). Its random stream is keyed by token
  // index, so a seeded request draws the same tokens after it.
  void preempt(Seq* s) {
    release(s);
    running.erase(std::find(running.begin(), running.end(), s));
    s->st->preempted();
    counters.preemptions++;
    waiting.push_front(s);
  }

  void release(Seq* s) {
    if (s->slot >= 0) cache_.release(s->slot);
    s->slot = -1;
    s->n_cached = 0;
  }

 private:
  Cache& cache_;
  const EngineOptions& opt_;
  int n_positions_;
};

template <class S>
concept Scheduler = requires {
  { S::name } -> std::convertible_to<std::string_view>;
};

}  // namespace servekit::serve
