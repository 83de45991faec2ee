// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// __syncthreads and its counting forms. On the host a barrier is a count of arrivals: each thread
// but the last parks its fiber; the last one releases them all and runs on.
//
// CUDA counts arrivals per barrier, not per call site, so a __syncthreads inside a branch that
// some threads skip can pair with a different __syncthreads and "work" on one GPU and hang on the
// next. The emulator records each arrival's call site and reports a barrier completed from more
// than one site as an error.
#include "servekit/simt/platform.hpp"

#if defined(SERVEKIT_SIMT_HOST)
#include <atomic>
#include <source_location>
#include "servekit/simt/block_runner.hpp"

namespace servekit::simt {
inline namespace SERVEKIT_DEVICE_ABI {
namespace detail {

// Arrive with predicate `pred`; returns the number of threads that arrived with a nonzero one.
SERVEKIT_SIMT_INLINE int block_barrier(int pred, const char* op, const std::source_location& loc) {
  Worker& w = *g_worker;
  const int me = w.current;
  WaitSite& site = w.wait[static_cast<std::size_t>(me)];
  site = WaitSite{op, 0, loc.file_name(), loc.line()};
  w.barrier_count += pred != 0;
  if (++w.barrier_arrived < w.n_threads) {
    w.state[static_cast<std::size_t>(me)] = ThreadState::AtBarrier;
    switch_away(w, me);
    return w.barrier_result;
  }
  // Last to arrive: every other thread is parked here; check they all came the same way.
  for (int i = 0; i < w.n_threads; ++i) {
    if (i != me && !same_site(w.wait[static_cast<std::size_t>(i)], site)) {
      w.barrier_sites_differ = true;
      break;
    }
  }
  if (w.barrier_sites_differ) {
    w.state[static_cast<std::size_t>(me)] = ThreadState::AtBarrier;
    w.report = "threads wait at different barriers: " + describe_waits(w);
    w.outcome = Outcome::Deadlock;
    switch_context(&w.fibers[static_cast<std::size_t>(me)]->ctx, w.main_ctx, w.main_stack);
  }
  w.barrier_result = w.barrier_count;
  w.barrier_count = 0;
  w.barrier_arrived = 0;
  for (int i = 0; i < w.n_threads; ++i) {
    if (i == me) continue;
    w.state[static_cast<std::size_t>(i)] = ThreadState::Ready;
    w.ready.push(i);
  }
  return w.barrier_result;
}

}  // namespace detail
}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::simt

SERVEKIT_SIMT_INLINE void __syncthreads(
    const std::source_location loc = std::source_location::current()) {
  servekit::simt::detail::block_barrier(0, "__syncthreads", loc);
}
SERVEKIT_SIMT_INLINE int __syncthreads_count(
    int pred, const std::source_location loc = std::source_location::current()) {
  return servekit::simt::detail::block_barrier(pred, "__syncthreads_count", loc);
}
SERVEKIT_SIMT_INLINE int __syncthreads_and(
    int pred, const std::source_location loc = std::source_location::current()) {
  return servekit::simt::detail::block_barrier(pred, "__syncthreads_and", loc) ==
         servekit::simt::detail::g_worker->n_threads;
}
SERVEKIT_SIMT_INLINE int __syncthreads_or(
    int pred, const std::source_location loc = std::source_location::current()) {
  return servekit::simt::detail::block_barrier(pred, "__syncthreads_or", loc) != 0;
}

// Blocks of one kernel run concurrently on different OS threads; their shared data is plain
// memory, so the fences are real fences.
inline void __threadfence() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
}
inline void __threadfence_block() {
  std::atomic_thread_fence(std::memory_order_acq_rel);
}
#endif
