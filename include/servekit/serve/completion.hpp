// SPDX-License-Identifier: Apache-2.0
#pragma once
// Completion: where the engine thread leaves a request's Result and the caller picks it up.
//
// Set once by the engine thread; read by any number of copies of the request's handle, each
// of which may wait, wait with a timeout or just look.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>

#include "servekit/serve/request.hpp"

namespace servekit::serve {

class Completion {
 public:
  // Called once, by the engine thread.
  void set(Result r) {
    {
      std::lock_guard lk(mu_);
      result_ = std::move(r);
    }
    cv_.notify_all();
  }
  bool ready() const {
    std::lock_guard lk(mu_);
    return result_.has_value();
  }
  // Blocks until the result is there; it stays there (several handles may read it).
  const Result& wait() const {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return result_.has_value(); });
    return *result_;
  }
  // True if the result came within d.
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> d) const {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, d, [&] { return result_.has_value(); });
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::optional<Result> result_;
};

}  // namespace servekit::serve
