// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// Streams, events and device-wide synchronisation, one API on both compilers. On the host every
// operation runs to completion when issued, so a stream is only a name and an event is a clock
// reading, except while a stream is captured (simt/graph.hpp): then the work issued to it is
// recorded, and what CUDA forbids during a capture throws CaptureError.
//
// The current stream: simt::StreamScope makes a stream this thread's current one while it
// lives, as PyTorch's stream guards do; the decoder's operations enqueue on current_stream().
#include "servekit/simt/platform.hpp"

#include <chrono>
#include <functional>
#include <string_view>
#include <utility>
#include <vector>

#include "servekit/simt/counters.hpp"
#include "servekit/simt/error.hpp"

namespace servekit::simt {
inline namespace SERVEKIT_DEVICE_ABI {

#if defined(SERVEKIT_SIMT_DEVICE)
using stream_handle = cudaStream_t;

// Throws servekit::Error naming `what` when a CUDA runtime call failed.
inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}
#else
struct HostStream {
  int id = 0;
};
using stream_handle = HostStream*;  // nullptr: the default stream
#endif

// Work issued where a capture forbids it: CUDA answers cudaErrorStreamCaptureUnsupported or
// cudaErrorStreamCaptureImplicit and invalidates the capture.
class CaptureError : public Error {
 public:
  using Error::Error;
};

namespace detail {
inline stream_handle& current_stream_slot() {
  thread_local stream_handle s = nullptr;
  return s;
}

#if defined(SERVEKIT_SIMT_HOST)
// The emulator's capture (cudaStreamCaptureModeThreadLocal): while this thread captures
// `stream`, the kernels and copies issued to it become nodes, run in order by Graph::launch.
struct Capture {
  stream_handle stream = nullptr;
  std::vector<std::function<void()>> nodes;
};
inline Capture*& capture_slot() {
  thread_local Capture* c = nullptr;
  return c;
}
// Throws CaptureError when this thread is capturing: `what` would wait for the device or
// allocate, which no graph can contain.
inline void forbid_in_capture(std::string_view what) {
  if (capture_slot())
    throw CaptureError(servekit::detail::cat(
        what,
        " while a stream is being captured: a graph cannot wait for the device, allocate "
        "or free (CUDA fails the capture)"));
}
// Whether work issued to stream s must be recorded instead of run: true while this thread
// captures s; throws CaptureError for any other stream during a capture (the default stream
// would synchronise with the capturing one; another stream's work would be left out).
inline bool recording(stream_handle s, std::string_view what) {
  Capture* c = capture_slot();
  if (!c) return false;
  if (s != c->stream)
    throw CaptureError(servekit::detail::cat(
        what, " issued to ", s ? "another stream" : "the default stream",
        " while a stream is being captured: it would not be part of the graph"));
  return true;
}
#else
// Under nvcc, the copies to the device this thread issues to the stream it captures: they run,
// and are counted, each time the graph is launched (simt/graph.hpp).
struct CaptureTally {
  stream_handle stream = nullptr;
  long long h2d = 0, h2d_bytes = 0;
};
inline CaptureTally*& capture_tally() {
  thread_local CaptureTally* t = nullptr;
  return t;
}
#endif
}  // namespace detail

// Whether this thread is capturing a stream under the emulator (simt/graph.hpp); what a
// capture records has not run yet, so device arrays hold the last step's values.
inline bool capturing_on_host() {
#if defined(SERVEKIT_SIMT_HOST)
  return detail::capture_slot() != nullptr;
#else
  return false;
#endif
}

// The stream this thread's operations enqueue on (default: the default stream).
inline stream_handle current_stream() {
  return detail::current_stream_slot();
}

// Makes s the current stream while it lives; restores the previous one.
class StreamScope {
 public:
  explicit StreamScope(stream_handle s) : prev_(std::exchange(detail::current_stream_slot(), s)) {}
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;
  ~StreamScope() { detail::current_stream_slot() = prev_; }

 private:
  stream_handle prev_;
};

class Stream {
 public:
  // blocking: the stream is ordered with the default stream both ways (cudaStreamDefault), so
  // work issued there (a buffer's resize, an upload at load) needs no extra event; otherwise
  // it runs independently of it (cudaStreamNonBlocking).
  explicit Stream(bool blocking = false) {
#if defined(SERVEKIT_SIMT_DEVICE)
    check(cudaStreamCreateWithFlags(&s_, blocking ? cudaStreamDefault : cudaStreamNonBlocking),
          "cudaStreamCreate");
#else
    (void)blocking;
    s_ = new HostStream{};
#endif
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept {
    if (this != &o) {
      destroy();
      s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
  }
  ~Stream() {
    destroy();
  }
  stream_handle handle() const {
    return s_;
  }
  operator stream_handle() const {
    return s_;
  }

  void synchronize() const {
#if defined(SERVEKIT_SIMT_DEVICE)
    detail::count(detail::counter_state().syncs);
    check(cudaStreamSynchronize(s_), "cudaStreamSynchronize");
#else
    detail::forbid_in_capture("cudaStreamSynchronize");
    detail::count(detail::counter_state().syncs);
#endif
  }

 private:
  void destroy() {
#if defined(SERVEKIT_SIMT_DEVICE)
    if (s_) cudaStreamDestroy(s_);
#else
    delete s_;
#endif
    s_ = nullptr;
  }
  stream_handle s_ = nullptr;
};

// Waits for all work issued so far, on every stream.
inline void synchronize() {
#if defined(SERVEKIT_SIMT_DEVICE)
  detail::count(detail::counter_state().syncs);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#else
  detail::forbid_in_capture("cudaDeviceSynchronize");
  detail::count(detail::counter_state().syncs);
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
#if defined(SERVEKIT_SIMT_DEVICE)
    detail::count(detail::counter_state().syncs);
    check(cudaEventSynchronize(e_), "cudaEventSynchronize");
#else
    detail::forbid_in_capture("cudaEventSynchronize");
    detail::count(detail::counter_state().syncs);
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

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::simt
