// SPDX-License-Identifier: Apache-2.0
#pragma once
// ElasticPool: the server's worker threads (transport.hpp), started as requests arrive (up to
// a cap) and ended after a while without work. A fixed pool starts every thread at once and
// keeps it: a stack that served one request under load stays resident forever. Here an idle
// server goes back to a few threads, and glibc gives an ending thread's stack pages back.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace servekit::serve::http {

class ElasticPool {
 public:
  ElasticPool(std::size_t max_threads, std::chrono::milliseconds linger)
      : max_(max_threads), linger_(linger) {}
  ~ElasticPool() { shutdown(); }

  void enqueue(std::function<void()> fn) {
    std::lock_guard lk(mu_);
    jobs_.push_back(std::move(fn));
    if (idle_ < jobs_.size() && live_ < max_) {
      live_++;
      // Detached, so that a thread's stack goes back to the system when it ends, not when
      // someone joins it: after a burst of 1,000 streams nothing may come to join them.
      std::thread([this] { work(); }).detach();
    }
    cv_.notify_one();
  }

  // Runs what is queued, then waits for every thread to end.
  void shutdown() {
    std::unique_lock lk(mu_);
    stop_ = true;
    cv_.notify_all();
    gone_cv_.wait(lk, [&] { return live_ == 0; });
  }

 private:
  void work() {
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
    // The last use of the pool: shutdown() returns only once it holds mu_ after this.
    live_--;
    gone_cv_.notify_all();
  }

  const std::size_t max_;
  const std::chrono::milliseconds linger_;
  mutable std::mutex mu_;
  std::condition_variable cv_, gone_cv_;
  std::deque<std::function<void()>> jobs_;
  std::size_t live_ = 0, idle_ = 0;
  bool stop_ = false;
};

}  // namespace servekit::serve::http
