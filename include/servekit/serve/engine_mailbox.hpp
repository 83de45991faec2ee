// SPDX-License-Identifier: Apache-2.0
#pragma once
// Mailbox: what the threads that submit and the engine thread share, under one mutex. Callers
// post prepared requests and cancellations, the adapter store's loader posts the loads that
// ended; the engine thread takes them all at once between steps and reports each request that
// ends. Everything else of an engine belongs to its thread alone and needs no lock.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <utility>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/lora/adapter_store.hpp"
#include "servekit/serve/engine_stats.hpp"
#include "servekit/serve/sched/core.hpp"

namespace servekit::serve {

class Mailbox {
 public:
  // What the engine thread takes in one go.
  struct Mail {
    std::vector<std::unique_ptr<Seq>> arrived;
    std::vector<uint64_t> cancels;
    std::vector<lora::Loaded> loaded;  // adapter loads that ended
  };

  uint64_t next_id() { return next_id_.fetch_add(1) + 1; }

  // Callers: hands prepared requests to the engine thread in one go.
  std::vector<RequestHandle> post(std::vector<std::unique_ptr<Seq>>& seqs) {
    std::vector<RequestHandle> hs;
    for (const auto& s : seqs) hs.push_back({s->st->id(), s->done});
    {
      std::lock_guard lk(mu_);
      if (stop_) fail("engine: submit after shutdown");
      for (auto& s : seqs) {
        pending_.insert(s->st->id());
        inbox_.push_back(std::move(s));
      }
    }
    cv_.notify_all();
    return hs;
  }

  // Callers: false if the id is unknown or has already ended.
  bool cancel(uint64_t id) {
    {
      std::lock_guard lk(mu_);
      if (!pending_.contains(id)) return false;
      cancels_.push_back(id);
    }
    cv_.notify_all();
    return true;
  }

  // The adapter store's loader thread.
  void loaded(lora::Loaded l) {
    {
      std::lock_guard lk(mu_);
      loaded_.push_back(std::move(l));
    }
    cv_.notify_all();
  }

  void stop() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
  }

  // Engine thread: waits until mail arrives or busy() (the engine's own state, which only this
  // thread changes) says there is work; false once stop() was called.
  template <class Busy>
  bool take(Mail& m, Busy&& busy) {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] {
      return stop_ || !inbox_.empty() || !cancels_.empty() || !loaded_.empty() || busy();
    });
    if (stop_) return false;
    m.arrived.swap(inbox_);
    m.cancels.swap(cancels_);
    m.loaded.swap(loaded_);
    return true;
  }

  // Engine thread, after stop: the requests posted but never taken.
  std::vector<std::unique_ptr<Seq>> unclaimed() {
    std::lock_guard lk(mu_);
    return std::move(inbox_);
  }

  // Engine thread: request id has ended (its result is delivered).
  void ended(uint64_t id) {
    {
      std::lock_guard lk(mu_);
      pending_.erase(id);
    }
    ended_cv_.notify_all();
  }

  // Callers: blocks until nothing posted is still to end.
  void wait_idle() {
    std::unique_lock lk(mu_);
    ended_cv_.wait(lk, [&] { return pending_.empty(); });
  }

  // Callers: blocks until the number of hs that have ended (a handle without a completion was
  // never posted, and counts as ended) differs from shown, and returns it. Woken by each
  // request that ends, never by a timer.
  int wait_ended(const std::vector<RequestHandle>& hs, int shown) {
    auto ended = [&] {
      int k = 0;
      for (const auto& h : hs) k += !h.done || !pending_.contains(h.id);
      return k;
    };
    std::unique_lock lk(mu_);
    ended_cv_.wait(lk, [&] { return ended() != shown; });
    return ended();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_, ended_cv_;  // mail arrived; a request ended
  std::vector<std::unique_ptr<Seq>> inbox_;
  std::vector<uint64_t> cancels_;
  std::vector<lora::Loaded> loaded_;
  std::unordered_set<uint64_t> pending_;  // posted and not yet ended
  bool stop_ = false;
  std::atomic<uint64_t> next_id_{0};
};

}  // namespace servekit::serve
