// SPDX-License-Identifier: Apache-2.0
#pragma once
// Engine<Model, Scheduler>: many requests sharing each forward pass.
//
// One engine thread owns the model and the KV cache. submit() (from any thread) checks and
// tokenizes the request on the caller's thread, then hands it over through a queue; the
// engine loop takes what arrived, lets the scheduler plan the step (which sequences, how many
// new tokens each, who is admitted or preempted), adds speculation's drafts (speculation.hpp),
// runs it as one ragged model::Batch, and feeds each finished row's logits to its RequestState,
// which samples, applies the stop rules and streams. A request ends exactly once: its handle gets
// its Result, after its slot and cache blocks are back in the pool and the engine thread has let go
// of it.
//
//   serve::Engine<Gpt2<Cfg>, serve::sched::Continuous> engine(model, tok, {.max_batch = 16});
//   auto h = engine.submit({.prompt = "Hello", .stop = {.max_new_tokens = 32}});
//   serve::Result r = h.get();
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/lora/adapter_store.hpp"
#include "servekit/lora/policy.hpp"
#include "servekit/model/batch.hpp"
#include "servekit/serve/adapter_parking.hpp"
#include "servekit/serve/adapter_slots.hpp"
#include "servekit/serve/engine_mailbox.hpp"
#include "servekit/serve/engine_stats.hpp"
#include "servekit/serve/memory_plan.hpp"
#include "servekit/serve/request.hpp"
#include "servekit/serve/request_checks.hpp"
#include "servekit/serve/request_state.hpp"
#include "servekit/serve/sched/continuous.hpp"
#include "servekit/serve/sched/core.hpp"
#include "servekit/serve/sched/sequential.hpp"
#include "servekit/serve/sched/static_batch.hpp"
#include "servekit/serve/speculation.hpp"
#include "servekit/serve/step_batch.hpp"
#include "servekit/text/tokenizer.hpp"

namespace servekit::serve {

template <class ModelT, Scheduler Sched = sched::Continuous>
requires SchedulerFor<Sched, typename ModelT::Cache>
class Engine {
 public:
  using Model = ModelT;
  using Scheduler = Sched;
  using Cache = typename Model::Cache;
  static constexpr int P = Model::Dims::n_positions, V = Model::Dims::vocab;
  static constexpr bool kLora = lora::enabled<typename Model::Config::Lora>;
  static constexpr bool kJump = feeds_chunks<Sched, Cache>();
  using Store = lora::AdapterStore<typename Model::Dims>;

  // The model and tokenizer must outlive the engine.
  Engine(Model& model, const text::Gpt2Tokenizer& tok, EngineOptions opt = {}, Sched sched = {})
      : model_(model),
        tok_(covering(tok)),  // first: before the cache is sized and allocated
        opt_(check_options(opt)),
        memory_(plan_memory<Model, Cache>(opt_)),  // throws before anything is allocated
        cache_(make_engine_cache(model, opt_, memory_)),
        core_(cache_, opt_, P),
        sched_(std::move(sched)) {
    // Every step of the engine fits its limits: size the model's step buffers once.
    allocating("the step buffers", memory_.workspace, [&] {
      model_.reserve(opt_.max_batched_tokens, max_logit_rows(opt_), cache_.max_len());
    });
    if constexpr (Core<Cache>::paged)
      if (opt_.prefix_caching && reuses_prefix<Sched, Cache>()) {
        cache_.enable_prefix_cache(opt_.prefix_cache_blocks);
        core_.use_prefix_cache(true);
      }
    if (const auto& d = opt_.speculative.draft) {
      if (d->vocab() != V)
        fail("engine: the draft model ", d->name(), " has ", d->vocab(),
             " tokens in its vocabulary, the model ", V, ": a draft must share the vocabulary");
      d->attach();
    }
    if (opt_.pad_id < 0) opt_.pad_id = std::max(0, tok.eos_id());
    if (opt_.pad_id >= V) opt_.pad_id = 0;
    if constexpr (kLora) {
      parking_ = std::make_unique<Parking>(model, opt_);
      parking_->store.listen([this](lora::Loaded l) { mail_.loaded(std::move(l)); });
    }
    publish_stats();
    thread_ = std::thread([this] { loop(); });
  }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  // Stops the loop; requests still waiting or running end as "cancelled".
  ~Engine() {
    mail_.stop();
    thread_.join();
    if (opt_.speculative.draft) opt_.speculative.draft->detach();
    if constexpr (kLora) parking_->slots.clear();  // the model keeps only its pinned adapters
  }

  static std::string name() { return std::string(Sched::name) + "/" + Model::name(); }
  const EngineOptions& options() const { return opt_; }

  // Where requests' adapters come from: register names with adapters().add(id, folder). An
  // adapter is read when a request first names it, on the store's loader thread.
  Store& adapters() requires kLora { return parking_->store; }

  // Checks and tokenizes r on the caller's thread and queues it. Throws servekit::Error for a
  // request that can never run (empty or over-long prompt, token id out of range, bad sampling
  // or stop values, an adapter without LoRA); nothing else is disturbed.
  RequestHandle submit(Request r) {
    std::vector<std::unique_ptr<Seq>> one;
    one.push_back(prepare(std::move(r)));
    return mail_.post(one).front();
  }

  // Cancels a waiting or running request; its result says "cancelled" and keeps the tokens
  // generated so far. False if the id is unknown or already finished.
  bool cancel(uint64_t id) { return mail_.cancel(id); }

  // Blocking: one request through the engine.
  Result generate(Request r) { return submit(std::move(r)).get(); }

  // Offline batch use: every request, results in the order given. A request that cannot run
  // gets finish_reason "error" and its message; the others run. progress(done, total) is
  // called from the caller's thread as results come in.
  std::vector<Result> run_all(std::vector<Request> reqs,
                              const std::function<void(int, int)>& progress = {}) {
    const int n = static_cast<int>(reqs.size());
    std::vector<Result> out(n);
    // All arrive in one hand-over, as an offline batch does: a static batch never starts
    // before its requests are all queued.
    std::vector<std::unique_ptr<Seq>> seqs;
    std::vector<int> index;
    for (int i = 0; i < n; i++) {
      try {
        seqs.push_back(prepare(std::move(reqs[i])));
        index.push_back(i);
      } catch (const std::exception& e) {
        out[i].finish_reason = std::string(finish::error);
        out[i].error = e.what();
      }
    }
    std::vector<RequestHandle> hs(n);
    auto queued = mail_.post(seqs);
    for (std::size_t k = 0; k < index.size(); k++) hs[index[k]] = queued[k];
    int shown = -1;
    while (true) {
      const int done = mail_.wait_ended(hs, shown);
      if (progress) progress(done, n);
      shown = done;
      if (done == n) break;
    }
    for (int i = 0; i < n; i++)
      if (hs[i].done) out[i] = hs[i].get();
    return out;
  }

  // What the engine sized and took at start: each part's bytes, the limit, the tokens that fit.
  const MemoryPlan& memory() const { return memory_; }

  EngineStats stats() const {
    std::lock_guard lk(stats_mu_);
    return stats_;
  }

  // Blocks until nothing is waiting or running (all submitted requests have ended).
  void wait_idle() { mail_.wait_idle(); }

 private:
  // Checks and tokenizes r (caller's thread).
  std::unique_ptr<Seq> prepare(Request r) {
    auto seq = std::make_unique<Seq>();
    std::vector<int32_t> prompt = r.prompt_ids.empty() ? tok_.encode(r.prompt) : r.prompt_ids;
    validate(r, prompt);
    const uint64_t id = mail_.next_id();
    seq->st = std::make_unique<RequestState>(id, std::move(r), std::move(prompt), tok_, P, V);
    return seq;
  }

  void validate(const Request& r, const std::vector<int32_t>& prompt) const {
    check_request<typename Model::Dims>(r, prompt);
    if (r.priority != 0 && !opt_.priority_scheduling)
      fail("request: priority ", r.priority,
           " asked for, but this engine schedules first come, first served "
           "(EngineOptions::priority_scheduling; --scheduling-policy priority)");
    if (r.adapter) {
      if constexpr (!kLora)
        fail("request: adapter '", *r.adapter,
             "' asked for, but this engine serves no LoRA adapters (lora::None)");
      else if (!parking_->slots.pinned(*r.adapter) && !parking_->store.locate(*r.adapter))
        fail("request: adapter '", *r.adapter,
             "' is not in the model, not registered (Engine::adapters().add) and not a folder");
    }
    if constexpr (Core<Cache>::paged) check_fits_pool(prompt, r, Cache::B, cache_.n_blocks());
  }

  void loop() {
    while (true) {
      Mailbox::Mail m;
      const bool open = mail_.take(
          m, [&] { return replace_ || !core_.waiting().empty() || !core_.running().empty(); });
      if (!open) break;
      for (auto& s : m.arrived) {
        Seq* p = s.get();
        live_.emplace(p->st->id(), std::move(s));
        if (p->st->finished())  // max_new_tokens = 0: nothing to run
          retire(p);
        else if (needs_adapter(*p))
          park(p);
        else
          core_.enqueue(p);
      }
      for (uint64_t id : m.cancels) cancel_now(id);
      if constexpr (kLora) place_parked(m.loaded);
      step();
      publish_stats();
    }
    // Shutdown: whatever is left ends as cancelled.
    std::vector<Seq*> left(core_.running().begin(), core_.running().end());
    left.insert(left.end(), core_.waiting().begin(), core_.waiting().end());
    if constexpr (kLora)
      left.insert(left.end(), parking_->parked().begin(), parking_->parked().end());
    for (auto& s : mail_.unclaimed()) {
      Seq* p = s.get();
      live_.emplace(p->st->id(), std::move(s));
      left.push_back(p);
    }
    for (Seq* s : left) {
      s->st->finish(finish::cancelled);
      retire(s);
    }
  }

  void cancel_now(uint64_t id) {
    auto it = live_.find(id);
    if (it == live_.end()) return;
    Seq* s = it->second.get();
    s->st->finish(finish::cancelled);
    retire(s);
  }

  // One step: schedule -> drafts -> build the batch -> execute -> update (vLLM's schedule /
  // propose / execute_model / update_from_output). Returns false when there was nothing to run.
  // A step in which every row brings its logits (decode rows and drafts, no prompt chunk) is
  // timed into cost_, the line speculation's rule reads; with a draft model, from before the
  // draft ran, so that a proposed row costs its share of the draft's forwards too.
  bool step() {
    if (!schedule()) return false;
    const auto t_draft = Clock::now();
    add_drafts(plan_, core_, opt_.speculative, cost_, opt_.max_batched_tokens, cache_.max_len(),
               Model::kDeviceSampling);
    const auto t0 = opt_.speculative.draft ? t_draft : Clock::now();
    batch_.build(plan_, opt_.pad_id, Model::kDeviceSampling, kMaskWords, core_.counters,
                 Model::kDeviceSampling && opt_.late_masks);
    const int rows = batch_.rows();
    const bool decode_only = rows == batch_.tokens();
    if (execute()) {
      core_.counters.steps++;
      update();
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    busy_s_ += s;
    if (decode_only && opt_.speculative.on()) cost_.observe(rows, s);
    return true;
  }

  // The scheduler's plan for this step, after retiring the ghosts it let go. False: nothing to
  // run.
  bool schedule() {
    plan_.clear();
    sched_.plan(core_, plan_);
    if (!core_.retiring().empty()) {
      for (Seq* s : core_.take_retiring()) retire(s);
      if (plan_.empty()) sched_.plan(core_, plan_);  // a static batch ended: start the next
    }
    if (!plan_.empty()) return true;
    // Nothing can run although requests wait: every one fits an empty cache (checked at
    // submit), so this is a scheduler bug; fail the oldest rather than hang.
    if (core_.running().empty() && !core_.waiting().empty()) {
      Seq* s = core_.waiting().front();
      s->st->finish(finish::error, "engine: the scheduler could not place this request");
      retire(s);
    }
    return false;
  }

  // Runs the model on the built batch. Device backends pick every row's token on the device
  // and download only the ids (and the logits when a request wants its top logprobs); the host
  // samples from the logits. False: the step threw, and every sequence in it has ended with the
  // error (its rows may be half-written); the others go on.
  bool execute() {
    try {
      const model::Batch b = batch_.batch();
      if constexpr (Model::kDeviceSampling) {
        ids_.resize(batch_.rows()), logprobs_.resize(batch_.rows());
        model_.forward_pick(cache_, b, ids_, logprobs_, batch_.with_logits() ? &logits_ : nullptr);
      } else {
        model_.forward(cache_, b, logits_);
      }
      return true;
    } catch (const std::exception& e) {
      for (const Work& w : plan_) {
        w.seq->st->finish(finish::error, e.what());
        retire(w.seq);
      }
      return false;
    }
  }

  // Feeds one row of logits (or the token the device picked from it) to s's request. True
  // when the request has finished (an error in sampling finishes it too).
  bool feed(Seq* s, int r) {
    const auto logits = batch_.with_logits()
                            ? std::span<const float>(logits_.data() + std::size_t(r) * V, V)
                            : std::span<const float>();
    const int before = s->st->generated();
    bool done;
    try {
      if constexpr (Model::kDeviceSampling)
        done = s->st->on_pick(ids_[r], logprobs_[r], logits);
      else
        done = s->st->on_logits(logits, sampler_);
    } catch (const std::exception& e) {
      s->st->finish(finish::error, e.what());
      done = true;
    }
    core_.counters.generated_tokens += s->st->generated() - before;
    return done;
  }

  // A chunk's rows of logits from row p on, one per new token from position s->n_cached: the
  // log-probabilities of the prompt tokens after them. An error ends the request.
  void feed_prompt(Seq* s, int p, int n) {
    try {
      for (int j = 0; j < n; j++)
        s->st->on_prompt_logits(s->n_cached + j,
                                std::span<const float>(logits_.data() + std::size_t(p + j) * V, V));
    } catch (const std::exception& e) {
      s->st->finish(finish::error, e.what());
    }
  }

  // Jump-forward: appends the tokens s's grammar forces next, fed in its next step as a chunk
  // (whose rows' logits equal one step each's: they are chunk-invariant). True when the
  // request has finished.
  bool jump(Seq* s) {
    if (!kJump || !opt_.jump_forward) return false;
    int n = 0;
    try {
      n = s->st->jump();
    } catch (const std::exception& e) {
      s->st->finish(finish::error, e.what());
    }
    core_.counters.generated_tokens += n;
    core_.counters.forced_tokens += n;
    return s->st->finished();
  }

  // Feeds each sequence's row of the step to its request: the sampled token (or logits to
  // sample from), the stop rules; retires what finished.
  void update() {
    for (std::size_t i = 0; i < plan_.size(); i++) {
      const Work& w = plan_[i];
      Seq* s = w.seq;
      const int r = batch_.row(i);
      bool done;
      if (!s->draft.empty()) {
        done = verify(s, r, opt_.speculative.k, core_,
                      [this](Seq* q, int row) { return feed(q, row); });
      } else {
        bool failed = false;  // in its prompt's log-probabilities
        if (const int p = batch_.prompt_row(i); p >= 0)
          feed_prompt(s, p, w.n_new), failed = s->st->finished();
        s->n_cached += w.n_new;
        core_.wrote(*s);
        if (s->ghost || (s->uncached() > 0 && !failed)) continue;  // a pad row, or a prompt chunk
        done = failed || feed(s, r);
      }
      if (!done) done = jump(s);
      if (!done) continue;
      if constexpr (keeps_finished<Sched, Cache>()) {
        if (s->st->finish_reason() != finish::cancelled &&
            s->st->finish_reason() != finish::error) {
          s->ghost = true;  // rides to the end of its static batch
          continue;
        }
      }
      retire(s);
    }
  }

  // Takes s out of the engine: slot and blocks back to the pool, then its result delivered.
  void retire(Seq* s) {
    core_.remove(s);
    if (opt_.speculative.draft) opt_.speculative.draft->forget(s->st->id());
    if constexpr (kLora)
      if (parking_->release(s)) replace_ = true;  // room may have come free for a parked one
    const uint64_t id = s->st->id();
    s->st->delivered();
    core_.counters.finished++;
    publish_stats();
    std::shared_ptr<Completion> done = std::move(s->done);
    std::function<void()> on_end = s->st->request().on_end;
    Result r = s->st->take_result();
    live_.erase(id);  // s is gone: nothing of the request is touched after this
    done->set(std::move(r));
    done.reset();
    if (on_end) on_end();
    mail_.ended(id);
  }

  void park(Seq* s) {
    if constexpr (kLora) parking_->park(s);
  }
  bool needs_adapter(const Seq& s) const {
    if constexpr (kLora)
      return s.st->request().adapter.has_value();
    else
      return false;
  }
  // Adapter loads that ended, then a pass over the parked requests: the placed ones join the
  // waiting queue, the failed ones end.
  void place_parked(std::vector<lora::Loaded>& loaded) requires kLora {
    for (auto& l : loaded)
      for (Seq* p : parking_->on_loaded(l)) {
        p->st->finish(finish::error, l.error);
        retire(p);
      }
    loaded.clear();
    replace_ = false;
    if (parking_->empty()) return;
    Placement pl = parking_->place();
    for (Seq* p : pl.placed) core_.enqueue(p);
    for (auto& [p, msg] : pl.failed) {
      p->st->finish(finish::error, msg);
      retire(p);
    }
  }

  void publish_stats() {
    EngineStats s = snapshot(core_, cache_, busy_s_);
    if (cost_.fitted()) s.step_a_s = cost_.a(), s.step_b_s = cost_.b();
    if constexpr (kLora) parking_->add_stats(s, core_.running(), core_.waiting());
    std::lock_guard lk(stats_mu_);
    stats_ = s;
  }

  static const text::Gpt2Tokenizer& covering(const text::Gpt2Tokenizer& tok) {
    require_tokenizer_covers(tok, V, "engine");
    return tok;
  }

  Model& model_;
  const text::Gpt2Tokenizer& tok_;
  EngineOptions opt_;
  MemoryPlan memory_;
  Cache cache_;
  Core<Cache> core_;
  Sched sched_;
  Sampler sampler_;  // host backends
  StepBatch batch_;  // the step as the model's input
  static constexpr int kMaskWords = (V + 31) / 32;
  // Device backends: the picked ids and their logprobs.
  std::vector<int32_t> ids_;
  std::vector<float> logprobs_;
  // Engine-thread state.
  std::unordered_map<uint64_t, std::unique_ptr<Seq>> live_;
  std::vector<Work> plan_;
  std::vector<float> logits_;
  double busy_s_ = 0;
  StepCost cost_;  // decode steps' seconds against their rows (speculating engines)
  Mailbox mail_;   // shared with submitting threads and the adapter store's loader
  mutable std::mutex stats_mu_;
  EngineStats stats_;
  // LoRA: the adapter tiers and the requests parked until their adapter is on the device.
  // Declared after what the store's loader thread touches (mail_), so the store (and its
  // thread) is gone first.
  using Parking = AdapterParking<Model>;
  std::conditional_t<kLora, std::unique_ptr<Parking>, std::monostate> parking_;
  bool replace_ = false;  // engine thread: an adapter was let go while requests are parked
  std::thread thread_;
};

}  // namespace servekit::serve
