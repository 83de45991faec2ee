// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// What the device code of a process did, counted on both compilers: kernel launches (issued or
// captured), graph launches, host synchronisations, copies each way with their bytes, device
// and pinned allocations and frees (a captured copy is counted when its graph runs). Under the
// emulator nothing waits and "device" memory is host memory, but each call is counted as what
// it is on a GPU (a null-stream copy to the device synchronises there; a copy back always
// does), so a test can hold a decode step to its budget without a GPU.
//
//   const simt::Counts before = simt::counts();
//   simt::LaunchLog log;                 // also keeps each launch's kernel, grid and block
//   model.forward(...);
//   const simt::Counts step = simt::counts() - before;   log.launches(): the step's launches
#include "servekit/simt/platform.hpp"

#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace servekit::simt {
inline namespace SERVEKIT_DEVICE_ABI {

struct Counts {
  long long launches = 0;
  long long syncs = 0;               // the host waited for the device
  long long h2d = 0, h2d_bytes = 0;  // copies host -> device
  long long d2h = 0, d2h_bytes = 0;  // copies device -> host
  long long allocs = 0, frees = 0;   // device and pinned allocations, and their frees
  long long graph_launches = 0;      // captured graphs replayed (simt/graph.hpp)

  friend Counts operator-(const Counts& a, const Counts& b) {
    return {a.launches - b.launches,   a.syncs - b.syncs, a.h2d - b.h2d,
            a.h2d_bytes - b.h2d_bytes, a.d2h - b.d2h,     a.d2h_bytes - b.d2h_bytes,
            a.allocs - b.allocs,       a.frees - b.frees, a.graph_launches - b.graph_launches};
  }
};

struct LaunchRecord {
  std::string kernel;
  dim3 grid, block;
  std::size_t smem = 0;  // dynamic shared memory
  // Global-memory bytes the launch reads and writes, by its launcher's model of the kernel
  // (simt::expect_bytes): each block's loads and stores, what several blocks load counted for
  // each (an L2 may serve the repeats). 0: not modelled.
  std::size_t bytes = 0;
  unsigned long long blocks() const {
    return static_cast<unsigned long long>(grid.x) * grid.y * grid.z;
  }
};

namespace detail {
struct CounterState {
  std::atomic<long long> launches{0}, syncs{0}, h2d{0}, h2d_bytes{0}, d2h{0}, d2h_bytes{0},
      allocs{0}, frees{0}, graph_launches{0};
  std::atomic<int> logs{0};  // LaunchLogs alive: launches take the lock only while one is
  std::mutex m;
  std::vector<LaunchRecord> records;
};
inline CounterState& counter_state() {
  static CounterState s;
  return s;
}
inline void count(std::atomic<long long>& c, long long n = 1) {
  c.fetch_add(n, std::memory_order_relaxed);
}
inline std::size_t& pending_bytes() {
  thread_local std::size_t b = 0;
  return b;
}
inline void count_launch(std::string_view kernel, dim3 grid, dim3 block, std::size_t smem) {
  auto& s = counter_state();
  count(s.launches);
  const std::size_t bytes = std::exchange(pending_bytes(), 0);
  if (s.logs.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard lock(s.m);
  s.records.push_back({std::string(kernel), grid, block, smem, bytes});
}
}  // namespace detail

// Whether a LaunchLog is keeping launches: models costlier than arithmetic (the attention's
// walk of its rows) are made only then.
inline bool logging_launches() {
  return detail::counter_state().logs.load(std::memory_order_relaxed) > 0;
}

// The global-memory bytes the next launch from this thread moves, for its LaunchRecord: a
// launcher's model of its kernel, given just before simt::launch.
inline void expect_bytes(std::size_t n) {
  detail::pending_bytes() = n;
}

inline Counts counts() {
  auto& s = detail::counter_state();
  auto r = [](const std::atomic<long long>& c) { return c.load(std::memory_order_relaxed); };
  return {r(s.launches),  r(s.syncs),  r(s.h2d),   r(s.h2d_bytes),     r(s.d2h),
          r(s.d2h_bytes), r(s.allocs), r(s.frees), r(s.graph_launches)};
}

// Keeps a record of every launch made while it lives (one log at a time is meaningful).
class LaunchLog {
 public:
  LaunchLog() {
    auto& s = detail::counter_state();
    std::lock_guard lock(s.m);
    if (s.logs++ == 0) s.records.clear();
  }
  LaunchLog(const LaunchLog&) = delete;
  LaunchLog& operator=(const LaunchLog&) = delete;
  ~LaunchLog() {
    auto& s = detail::counter_state();
    std::lock_guard lock(s.m);
    if (--s.logs == 0) s.records.clear();
  }
  // The launches so far, oldest first; the log is emptied.
  std::vector<LaunchRecord> take() {
    auto& s = detail::counter_state();
    std::lock_guard lock(s.m);
    return std::exchange(s.records, {});
  }
};

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::simt
