// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// Device memory, one API on both compilers: cudaMalloc and cudaMemcpy under nvcc; aligned host
// memory and memcpy under the emulator (where "device" memory is ordinary memory). Pinned host
// memory (PinnedBuffer) is what an asynchronous copy, and a captured one, reads from.
//
// Under a capture (simt/graph.hpp) a copy to the capturing stream is recorded, to run when the
// graph does; allocations, frees and copies back to the host (which wait) throw CaptureError.
#include "servekit/simt/platform.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <span>
#include <type_traits>
#include <utility>

#include "servekit/core/memory_info.hpp"
#include "servekit/simt/counters.hpp"
#include "servekit/simt/stream.hpp"

namespace servekit::simt {
inline namespace SERVEKIT_DEVICE_ABI {

// (n) elements of T in device memory, uninitialised; n == 0 gives nullptr.
template <class T>
T* malloc_device(std::size_t n) {
  if (n == 0) return nullptr;
  const std::size_t bytes = n * sizeof(T);
#if defined(SERVEKIT_SIMT_HOST)
  detail::forbid_in_capture("simt::malloc_device (cudaMalloc)");
#endif
  detail::count(detail::counter_state().allocs);
#if defined(SERVEKIT_SIMT_DEVICE)
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess)
    fail("simt::malloc_device: cudaMalloc of ", bytes, " bytes failed: ", cudaGetErrorString(e));
  return static_cast<T*>(p);
#else
  // 256-byte alignment, as cudaMalloc gives.
  constexpr std::size_t kAlign = 256;
  void* p = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  if (!p) fail("simt::malloc_device: allocation of ", bytes, " bytes failed");
  return static_cast<T*>(p);
#endif
}

// Bytes of device memory free now (cudaMemGetInfo); under the emulator, the host's.
inline std::size_t device_memory_available() {
#if defined(SERVEKIT_SIMT_DEVICE)
  std::size_t free = 0, total = 0;
  const cudaError_t e = cudaMemGetInfo(&free, &total);
  if (e != cudaSuccess)
    fail("simt::device_memory_available: cudaMemGetInfo failed: ", cudaGetErrorString(e));
  return free;
#else
  return host_memory_available();
#endif
}

inline void free_device(void* p) {
#if defined(SERVEKIT_SIMT_HOST)
  if (p) detail::forbid_in_capture("simt::free_device (cudaFree)");
#endif
  if (p) detail::count(detail::counter_state().frees);
#if defined(SERVEKIT_SIMT_DEVICE)
  if (p) cudaFree(p);
#else
  std::free(p);
#endif
}

#if defined(SERVEKIT_SIMT_HOST)
namespace detail {
// The emulator's pinned allocations (start -> bytes), so that a captured copy can be checked.
struct PinnedRanges {
  std::mutex m;
  std::map<std::uintptr_t, std::size_t> ranges;
};
inline PinnedRanges& pinned_ranges() {
  static PinnedRanges r;
  return r;
}
inline bool is_pinned(const void* p, std::size_t bytes) {
  auto& r = pinned_ranges();
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lock(r.m);
  auto it = r.ranges.upper_bound(a);
  if (it == r.ranges.begin()) return false;
  --it;
  return a + bytes <= it->first + it->second;
}
}  // namespace detail
#endif

// (n) elements host -> device. On the default stream it returns when the copy is done (the
// host may reuse src); on another stream it is ordered there and src must stay as it is until
// the stream passes the copy (pinned memory: the copy is truly asynchronous).
template <class T>
void copy_to_device(T* dst, const T* src, std::size_t n, stream_handle s = nullptr) {
  auto& c = detail::counter_state();
#if defined(SERVEKIT_SIMT_HOST)
  if (detail::recording(s, "simt::copy_to_device")) {
    // A graph's copy reads its source when the graph runs: the step writes the (pinned)
    // staging buffer, then launches the graph.
    if (n && !detail::is_pinned(src, n * sizeof(T)))
      throw CaptureError(servekit::detail::cat(
          "simt::copy_to_device: a captured copy of ", n * sizeof(T),
          " bytes reads pageable host memory; a graph's copies must read pinned memory "
          "(simt::PinnedBuffer)"));
    detail::capture_slot()->nodes.push_back([dst, src, n] {
      auto& c = detail::counter_state();
      detail::count(c.h2d), detail::count(c.h2d_bytes, static_cast<long long>(n * sizeof(T)));
      if (n) std::memcpy(dst, src, n * sizeof(T));
    });
    return;
  }
#else
  if (auto* t = detail::capture_tally(); t && s == t->stream) {
    t->h2d++, t->h2d_bytes += static_cast<long long>(n * sizeof(T));
    check(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyHostToDevice, s), "copy_to_device");
    return;
  }
#endif
  detail::count(c.h2d), detail::count(c.h2d_bytes, static_cast<long long>(n * sizeof(T)));
  if (!s) detail::count(c.syncs);  // a null-stream copy waits for it on a GPU
#if defined(SERVEKIT_SIMT_DEVICE)
  check(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyHostToDevice, s), "copy_to_device");
  if (!s) check(cudaStreamSynchronize(s), "copy_to_device");
#else
  if (n) std::memcpy(dst, src, n * sizeof(T));
#endif
}

// (n) elements device -> host; returns when the data is on the host.
template <class T>
void copy_to_host(T* dst, const T* src, std::size_t n, stream_handle s = nullptr) {
  auto& c = detail::counter_state();
#if defined(SERVEKIT_SIMT_HOST)
  detail::forbid_in_capture("simt::copy_to_host (it waits for the copy)");
#endif
  detail::count(c.d2h), detail::count(c.d2h_bytes, static_cast<long long>(n * sizeof(T)));
  detail::count(c.syncs);
#if defined(SERVEKIT_SIMT_DEVICE)
  check(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToHost, s), "copy_to_host");
  check(cudaStreamSynchronize(s), "copy_to_host");
#else
  (void)s;
  if (n) std::memcpy(dst, src, n * sizeof(T));
#endif
}

// Set (n) elements' bytes to `byte`.
template <class T>
void memset_device(T* dst, int byte, std::size_t n, stream_handle s = nullptr) {
#if defined(SERVEKIT_SIMT_DEVICE)
  check(cudaMemsetAsync(dst, byte, n * sizeof(T), s), "memset_device");
#else
  if (detail::recording(s, "simt::memset_device")) {
    detail::capture_slot()->nodes.push_back([dst, byte, n] {
      if (n) std::memset(dst, byte, n * sizeof(T));
    });
    return;
  }
  if (n) std::memset(dst, byte, n * sizeof(T));
#endif
}

// An owning (n) array of T in device memory.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t n) : p_(malloc_device<T>(n)), n_(n) {}
  explicit DeviceBuffer(std::span<const T> host) : DeviceBuffer(host.size()) { upload(host); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      free_device(p_);
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { free_device(p_); }

  T* data() const { return p_; }
  std::size_t size() const { return n_; }

  void upload(std::span<const T> host, stream_handle s = nullptr) {
    if (host.size() != n_)
      fail("DeviceBuffer::upload: ", host.size(), " elements into a buffer of ", n_);
    copy_to_device(p_, host.data(), n_, s);
  }
  void download(std::span<T> host, stream_handle s = nullptr) const {
    if (host.size() != n_)
      fail("DeviceBuffer::download: ", n_, " elements into a host span of ", host.size());
    copy_to_host(host.data(), p_, n_, s);
  }
  void fill_bytes(int byte, stream_handle s = nullptr) { memset_device(p_, byte, n_, s); }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

// (n) elements device -> device, ordered on stream s.
template <class T>
void copy_on_device(T* dst, const T* src, std::size_t n, stream_handle s = nullptr) {
#if defined(SERVEKIT_SIMT_DEVICE)
  if (n)
    check(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToDevice, s), "copy_on_device");
#else
  if (detail::recording(s, "simt::copy_on_device")) {
    detail::capture_slot()->nodes.push_back([dst, src, n] {
      if (n) std::memmove(dst, src, n * sizeof(T));
    });
    return;
  }
  if (n) std::memmove(dst, src, n * sizeof(T));
#endif
}

// A resizable (n) array of trivially copyable T in device memory: std::vector's semantics for
// what the decoder needs (size, data, resize keeping the contents and zeroing new elements,
// assign from host), so that code generic over the storage reads the same. Growing reallocates
// to exactly n (the decoder's buffers grow to the largest step and stay). A resize's copies are
// on the default stream.
template <class T>
class DeviceVector {
  static_assert(std::is_trivially_copyable_v<T>, "servekit: DeviceVector<T> needs a trivial T");

 public:
  using value_type = T;
  DeviceVector() = default;
  explicit DeviceVector(std::size_t n) { resize(n); }
  explicit DeviceVector(std::span<const T> host) { assign(host); }

  T* data() { return buf_.data(); }
  const T* data() const { return buf_.data(); }
  std::size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }

  void resize(std::size_t n) {
    if (n > buf_.size()) {
      DeviceBuffer<T> grown(n);
      copy_on_device(grown.data(), buf_.data(), n_);
      buf_ = std::move(grown);
    }
    if (n > n_) memset_device(buf_.data() + n_, 0, n - n_);
    n_ = n;
  }
  // The vector becomes a copy of host (its size included), ordered on stream s.
  void assign(std::span<const T> host, stream_handle s = nullptr) {
    if (host.size() > buf_.size()) buf_ = DeviceBuffer<T>(host.size());
    n_ = host.size();
    copy_to_device(buf_.data(), host.data(), n_, s);
  }
  // host = the first host.size() elements, after the work before it on stream s; returns when
  // they are on the host.
  void download(std::span<T> host, stream_handle s = nullptr) const {
    if (host.size() > n_)
      fail("DeviceVector::download: ", host.size(), " elements from a vector of ", n_);
    copy_to_host(host.data(), buf_.data(), host.size(), s);
  }

 private:
  DeviceBuffer<T> buf_;  // capacity
  std::size_t n_ = 0;
};

// (n) elements of T in page-locked host memory (cudaMallocHost), uninitialised: what an
// asynchronous copy reads from or writes to while the host goes on. Growing keeps the contents.
template <class T>
class PinnedBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "servekit: PinnedBuffer<T> needs a trivial T");

 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t n) { grow(n); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      release(p_);
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  ~PinnedBuffer() { release(p_); }

  T* data() const { return p_; }
  std::size_t size() const { return n_; }
  // At least n elements, the first size() kept.
  void grow(std::size_t n) {
    if (n <= n_) return;
    T* q = allocate(n);
    if (n_) std::memcpy(q, p_, n_ * sizeof(T));
    release(p_);
    p_ = q, n_ = n;
  }

 private:
  static T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
#if defined(SERVEKIT_SIMT_HOST)
    detail::forbid_in_capture("simt::PinnedBuffer (cudaMallocHost)");
#endif
    detail::count(detail::counter_state().allocs);
#if defined(SERVEKIT_SIMT_DEVICE)
    void* p = nullptr;
    const cudaError_t e = cudaMallocHost(&p, bytes);
    if (e != cudaSuccess)
      fail("simt::PinnedBuffer: cudaMallocHost of ", bytes,
           " bytes failed: ", cudaGetErrorString(e));
    return static_cast<T*>(p);
#else
    constexpr std::size_t kAlign = 256;
    void* p = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
    if (!p) fail("simt::PinnedBuffer: allocation of ", bytes, " bytes failed");
    auto& r = detail::pinned_ranges();
    std::lock_guard lock(r.m);
    r.ranges[reinterpret_cast<std::uintptr_t>(p)] = bytes;
    return static_cast<T*>(p);
#endif
  }
  static void release(T* p) {
    if (!p) return;
#if defined(SERVEKIT_SIMT_HOST)
    detail::forbid_in_capture("simt::PinnedBuffer (cudaFreeHost)");
#endif
    detail::count(detail::counter_state().frees);
#if defined(SERVEKIT_SIMT_DEVICE)
    cudaFreeHost(p);
#else
    {
      auto& r = detail::pinned_ranges();
      std::lock_guard lock(r.m);
      r.ranges.erase(reinterpret_cast<std::uintptr_t>(p));
    }
    std::free(p);
#endif
  }
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::simt
