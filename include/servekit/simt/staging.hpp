// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// StagingBuffer: the arrays the host builds for one step of device work (indices, sampling
// parameters, masks), packed in one pinned buffer at 16-byte offsets and uploaded with one
// asynchronous copy: the plan half of a plan/run split. Its device twin grows only in
// reserve_device(), never in upload(), so an upload inside a capture allocates nothing, and a
// graph that captured the upload reads whatever the host packed before each replay.
//
//   staging.clear();
//   const std::size_t at = staging.put(std::span<const int32_t>(ids));   // an offset
//   staging.reserve_device();                                            // outside a capture
//   staging.upload(stream);
//   kernel(..., staging.device<int32_t>(at));
#include "servekit/simt/platform.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <type_traits>

#include "servekit/simt/memory.hpp"

namespace servekit::simt {
inline namespace SERVEKIT_DEVICE_ABI {

class StagingBuffer {
 public:
  static constexpr std::size_t kAlign = 16;

  void clear() { used_ = 0; }
  std::size_t bytes() const { return used_; }

  // Appends v at the next aligned offset and returns that offset.
  template <class T>
  std::size_t put(std::span<const T> v) {
    static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= kAlign);
    const std::size_t at = (used_ + kAlign - 1) / kAlign * kAlign;
    const std::size_t end = at + v.size_bytes();
    room(end);
    if (!v.empty()) std::memcpy(host_.data() + at, v.data(), v.size_bytes());
    used_ = end;
    return at;
  }
  // put(v), followed by zeros up to n elements: an array whose upload has one size whatever
  // part of it a step fills (a graph's copy has a fixed size).
  template <class T>
  std::size_t put_padded(std::span<const T> v, std::size_t n) {
    const std::size_t at = put(v);
    const std::size_t end = at + std::max(n, v.size()) * sizeof(T);
    room(end);
    std::memset(host_.data() + used_, 0, end - used_);
    used_ = end;
    return at;
  }
  // Room for `bytes` on both sides, so that steps up to that size allocate nothing.
  void reserve(std::size_t bytes) {
    host_.grow(bytes);
    if (dev_.size() < bytes) dev_ = DeviceBuffer<std::byte>(bytes);
  }
  // The device twin holds at least what was put; may allocate, so not inside a capture.
  void reserve_device() {
    if (dev_.size() < used_) dev_ = DeviceBuffer<std::byte>(std::max(used_, host_.size()));
  }
  // One copy of what was put, ordered on stream s.
  void upload(stream_handle s) {
    if (dev_.size() < used_)
      fail("simt::StagingBuffer::upload: ", used_, " bytes staged, ", dev_.size(),
           " reserved on the device (call reserve_device first)");
    copy_to_device(dev_.data(), host_.data(), used_, s);
  }
  // Where the array put at offset `at` is in device memory (valid after upload()).
  template <class T>
  const T* device(std::size_t at) const {
    return reinterpret_cast<const T*>(dev_.data() + at);
  }

 private:
  // The host side holds `end` bytes (doubling, so that a growing step copies little).
  void room(std::size_t end) {
    if (end > host_.size()) host_.grow(std::max(end, 2 * host_.size()));
  }

  PinnedBuffer<std::byte> host_;
  DeviceBuffer<std::byte> dev_;
  std::size_t used_ = 0;
};

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::simt
