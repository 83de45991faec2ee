// SPDX-License-Identifier: Apache-2.0
#pragma once
// ElasticPool: cpp-httplib's connection threads, started as connections arrive (up to a cap)
// and ended after a while without work. httplib's own pool starts every thread at once and
// keeps it: a stack that served one connection under load stays resident forever. Here an idle
// server goes back to a few threads, and glibc gives an ending thread's stack pages back.
#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

namespace servekit::serve::http {

class ElasticPool : public httplib::TaskQueue {
 public:
  ElasticPool(std::size_t max_threads, std::chrono::milliseconds linger)
      : max_(max_threads), linger_(linger) {}
  ~ElasticPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::lock_guard lk(mu_);
    jobs_.push_back(std::move(fn));
    reap();  // join threads that have ended
    if (idle_ < jobs_.size() && live_ < max_) {
      live_++;
      threads_.emplace_back();
      auto it = std::prev(threads_.end());
      *it = std::thread([this, it] { work(it); });
    }
    cv_.notify_one();
  }

  // Runs what is queued, then joins every thread.
  void shutdown() override {
    std::unique_lock lk(mu_);
    stop_ = true;
    cv_.notify_all();
    gone_cv_.wait(lk, [&] { return live_ == 0; });
    reap();
  }

 private:
  using Slot = std::list<std::thread>::iterator;

  void work(Slot self) {
    std::unique_lock lk(mu_);
    while (true) {
      idle_++;
      const bool woke = cv_.wait_for(lk, linger_, [&] { return stop_ || !jobs_.empty(); });
      idle_--;
      if (!jobs_.empty()) {
        auto fn = std::move(jobs_.front());
        jobs_.pop_front();
        lk.unlock();
        fn();
        lk.lock();
        continue;
      }
      if (stop_ || !woke) break;  // shutting down, or nothing came for linger_
    }
    ended_.push_back(self);  // joined by the next enqueue() or by shutdown()
    live_--;
    gone_cv_.notify_all();
  }

  void reap() {  // mu_ held
    for (Slot s : ended_) {
      if (s->joinable()) s->join();
      threads_.erase(s);
    }
    ended_.clear();
  }

  const std::size_t max_;
  const std::chrono::milliseconds linger_;
  mutable std::mutex mu_;
  std::condition_variable cv_, gone_cv_;
  std::deque<std::function<void()>> jobs_;
  std::list<std::thread> threads_;
  std::vector<Slot> ended_;
  std::size_t live_ = 0, idle_ = 0;
  bool stop_ = false;
};

}  // namespace servekit::serve::http
