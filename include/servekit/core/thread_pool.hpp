// SPDX-License-Identifier: Apache-2.0
#pragma once
// The host kernels' threads: one persistent pool whose workers park between jobs.
//
// A decode step runs ~130 parallel loops. OpenMP's workers spin ~10 ms after each one before
// they sleep, so beside any other busy thread (another process, the engine's loop, a server's
// connections) they take the cores that thread needs and a step gets 2-5x slower. Here a
// worker spins only a short while (SERVEKIT_SPIN_US, default 50 us: long enough to catch the
// next loop of the same step), then sleeps on a futex. Work is split into chunks that the
// caller and the workers grab in turn, so a worker the OS has descheduled delays nothing:
// the others take its share.
//
//   parallel_for(n, body)         body(i) for i in [0, n), chunks sized for the thread count
//   parallel_for(n, body, grain)  chunks of `grain` indices (1: one task at a time)
//
// Threads: SERVEKIT_THREADS, else OMP_NUM_THREADS (through omp_get_max_threads), else the CPUs
// this process may run on; set_host_threads(n) changes it between steps. A loop started inside
// another one, or while another thread's loop holds the pool, runs on its caller alone. The
// body must not throw (the kernels do not).
//
// Compiled with SERVEKIT_OPENMP_LOOPS, parallel_for is an OpenMP loop instead (dynamic chunks
// of the same size): the baseline bench/shared_machine.py compares the pool with.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <omp.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace servekit {

namespace detail {
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

inline int env_int(const char* name, int fallback) {
  const char* s = std::getenv(name);
  if (!s || !*s) return fallback;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  return *end == '\0' && v >= 0 && v <= (1 << 20) ? static_cast<int>(v) : fallback;
}

inline thread_local bool in_parallel = false;  // this thread is running a pool's chunk
}  // namespace detail

class ThreadPool {
 public:
  explicit ThreadPool(int threads)
      : spin_(std::chrono::microseconds(detail::env_int("SERVEKIT_SPIN_US", 50))) {
    start(threads);
  }
  ~ThreadPool() { stop(); }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Waits for a running loop to end, then restarts the workers (n >= 1, the caller included).
  void resize(int n) {
    std::lock_guard lock(busy_);
    stop();
    start(n);
  }

  template <class F>
  void parallel_for(int n, const F& body, int grain = 0) {
    if (n <= 0) return;
    const int T = threads();
    if (grain <= 0) grain = std::max(1, n / (4 * T));
    const int chunks = (n + grain - 1) / grain;
    std::unique_lock lock(busy_, std::try_to_lock);
    if (T == 1 || chunks == 1 || detail::in_parallel || !lock.owns_lock()) {
      for (int i = 0; i < n; i++) body(i);
      return;
    }
    // Publish the job. next_ is closed first, so a worker still reading the previous job's
    // fields cannot take a chunk with some of this job's; it is opened once they are written.
    const uint32_t e = epoch_.load(std::memory_order_relaxed) + 1;
    next_.store(uint64_t(e) << 32 | kClosed, std::memory_order_seq_cst);
    constexpr auto rel = std::memory_order_release;
    fn_.store(
        [](const void* ctx, int i0, int i1) {
          const F& f = *static_cast<const F*>(ctx);
          for (int i = i0; i < i1; i++) f(i);
        },
        rel);
    ctx_.store(&body, rel);
    n_.store(n, rel);
    grain_.store(grain, rel);
    chunks_.store(chunks, rel);
    done_.store(0, std::memory_order_relaxed);
    next_.store(uint64_t(e) << 32, std::memory_order_seq_cst);
    epoch_.store(e, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) epoch_.notify_all();
    work(e);
    // The last chunks may be on workers: wait for them, yielding the core if it takes long.
    for (int spins = 0; done_.load(std::memory_order_acquire) < chunks; spins++) {
      if (spins < 4096)
        detail::cpu_relax();
      else
        std::this_thread::yield();
    }
  }

 private:
  // Grabs and runs chunks of job e until none is left. A chunk is taken by moving next_ from
  // (e, i) to (e, i + 1), so a worker that read the fields of another job takes nothing, and
  // the body (on the caller's stack) is alive while any chunk of its job is unfinished.
  void work(uint32_t e) {
    constexpr auto acq = std::memory_order_acquire;
    const auto fn = fn_.load(acq);
    const void* ctx = ctx_.load(acq);
    const int n = n_.load(acq), grain = grain_.load(acq), chunks = chunks_.load(acq);
    // Had any field above been the next job's, this load sees next_ closed or reopened for it.
    uint64_t cur = next_.load(std::memory_order_seq_cst);
    detail::in_parallel = true;
    for (;;) {
      if (uint32_t(cur >> 32) != e || int(uint32_t(cur)) >= chunks) break;
      if (!next_.compare_exchange_weak(cur, cur + 1, std::memory_order_acq_rel)) continue;
      const int c = int(uint32_t(cur));
      fn(ctx, c * grain, std::min(n, (c + 1) * grain));
      done_.fetch_add(1, std::memory_order_release);
      cur = next_.load(std::memory_order_acquire);
    }
    detail::in_parallel = false;
  }

  void worker_loop() {
    uint32_t seen = epoch_.load(std::memory_order_acquire);
    for (;;) {
      uint32_t e = epoch_.load(std::memory_order_acquire);
      const auto t0 = std::chrono::steady_clock::now();
      for (int spins = 0; e == seen && !quit_.load(std::memory_order_relaxed); spins++) {
        if ((spins & 63) == 63 && std::chrono::steady_clock::now() - t0 > spin_) {
          // Park. The caller reads sleepers_ after publishing the epoch (both seq_cst), so
          // either it sees us and wakes us, or our wait sees the new epoch and returns.
          sleepers_.fetch_add(1, std::memory_order_seq_cst);
          epoch_.wait(seen, std::memory_order_seq_cst);
          sleepers_.fetch_sub(1, std::memory_order_seq_cst);
        } else {
          detail::cpu_relax();
        }
        e = epoch_.load(std::memory_order_acquire);
      }
      if (quit_.load(std::memory_order_acquire)) return;
      seen = e;
      work(e);
    }
  }

  void start(int n) {
    quit_.store(false);
    for (int i = 1; i < std::max(1, n); i++) workers_.emplace_back([this] { worker_loop(); });
  }

  void stop() {
    quit_.store(true, std::memory_order_seq_cst);
    epoch_.fetch_add(1, std::memory_order_seq_cst);  // wakes parked workers; no job to take
    epoch_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  std::vector<std::thread> workers_;
  std::mutex busy_;  // held by the thread whose loop runs
  std::chrono::steady_clock::duration spin_;
  std::atomic<uint32_t> epoch_{0};  // bumped once per job (and to stop)
  std::atomic<uint64_t> next_{0};   // (epoch << 32) | next chunk
  std::atomic<int> done_{0};        // chunks of the current job finished
  std::atomic<int> sleepers_{0};
  std::atomic<bool> quit_{false};
  static constexpr uint64_t kClosed = 0xffffffffu;  // a chunk index no job reaches
  // The current job, written by the caller while no chunk of the previous one is left.
  std::atomic<void (*)(const void*, int, int)> fn_{nullptr};
  std::atomic<const void*> ctx_{nullptr};
  std::atomic<int> n_{0}, grain_{1}, chunks_{0};
};

namespace detail {
inline int default_threads() {
  const int env = env_int("SERVEKIT_THREADS", 0);
  return env > 0 ? env : std::max(1, omp_get_max_threads());
}
}  // namespace detail

// The pool the host kernels use, started on first use and never destroyed: a thread still
// running a kernel while the program exits must not find it gone (its parked workers end
// with the process).
inline ThreadPool& host_pool() {
  static ThreadPool* pool = new ThreadPool(detail::default_threads());
  return *pool;
}

#ifndef SERVEKIT_OPENMP_LOOPS
inline int host_threads() {
  return host_pool().threads();
}
inline void set_host_threads(int n) {
  host_pool().resize(std::max(1, n));
}

template <class F>
void parallel_for(int n, const F& body, int grain = 0) {
  host_pool().parallel_for(n, body, grain);
}
#else
inline int host_threads() {
  return omp_get_max_threads();
}
inline void set_host_threads(int n) {
  omp_set_num_threads(std::max(1, n));
}

template <class F>
void parallel_for(int n, const F& body, int grain = 0) {
  if (grain <= 0) grain = std::max(1, n / (4 * host_threads()));
#pragma omp parallel for schedule(dynamic, grain) if (n > grain)
  for (int i = 0; i < n; i++) body(i);
}
#endif

}  // namespace servekit
