// SPDX-License-Identifier: Apache-2.0
#pragma once
// Streams, events and device-wide synchronisation, one API on both compilers. On the host every
// operation runs to completion when issued, so a stream is only a name and an event is a clock
// reading.
#include "servekit/simt/platform.hpp"

#include <chrono>
#include <utility>

#include "servekit/simt/counters.hpp"
#include "servekit/simt/error.hpp"

namespace servekit::simt {

#if defined(SERVEKIT_SIMT_DEVICE)
using stream_handle = cudaStream_t;

// Throws servekit::Error naming `what` when a CUDA runtime call failed.
inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}
#else
struct HostStream;
using stream_handle = HostStream*;  // nullptr: the default stream
#endif

class Stream {
 public:
  Stream() {
#if defined(SERVEKIT_SIMT_DEVICE)
    check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreate");
#endif
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  ~Stream() {
#if defined(SERVEKIT_SIMT_DEVICE)
    if (s_) cudaStreamDestroy(s_);
#endif
  }
  stream_handle handle() const {
    return s_;
  }
  operator stream_handle() const {
    return s_;
  }

  void synchronize() const {
    detail::count(detail::counter_state().syncs);
#if defined(SERVEKIT_SIMT_DEVICE)
    check(cudaStreamSynchronize(s_), "cudaStreamSynchronize");
#endif
  }

 private:
  stream_handle s_ = nullptr;
};

// Waits for all work issued so far, on every stream.
inline void synchronize() {
  detail::count(detail::counter_state().syncs);
#if defined(SERVEKIT_SIMT_DEVICE)
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#endif
}

class Event {
 public:
  Event() {
#if defined(SERVEKIT_SIMT_DEVICE)
    check(cudaEventCreate(&e_), "cudaEventCreate");
#endif
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() {
#if defined(SERVEKIT_SIMT_DEVICE)
    if (e_) cudaEventDestroy(e_);
#endif
  }

  void record(stream_handle s = nullptr) {
#if defined(SERVEKIT_SIMT_DEVICE)
    check(cudaEventRecord(e_, s), "cudaEventRecord");
#else
    (void)s;
    t_ = std::chrono::steady_clock::now();
#endif
    recorded_ = true;
  }

  void synchronize() const {
    detail::count(detail::counter_state().syncs);
#if defined(SERVEKIT_SIMT_DEVICE)
    check(cudaEventSynchronize(e_), "cudaEventSynchronize");
#endif
  }

  // Milliseconds from `start` to `stop`; both must have been recorded.
  friend float elapsed_ms(const Event& start, const Event& stop) {
    if (!start.recorded_ || !stop.recorded_) fail("simt::elapsed_ms: an event was never recorded");
#if defined(SERVEKIT_SIMT_DEVICE)
    float ms = 0;
    stop.synchronize();
    check(cudaEventElapsedTime(&ms, start.e_, stop.e_), "cudaEventElapsedTime");
    return ms;
#else
    return std::chrono::duration<float, std::milli>(stop.t_ - start.t_).count();
#endif
  }

 private:
#if defined(SERVEKIT_SIMT_DEVICE)
  cudaEvent_t e_ = nullptr;
#else
  std::chrono::steady_clock::time_point t_{};
#endif
  bool recorded_ = false;
};

}  // namespace servekit::simt
