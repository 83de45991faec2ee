// SPDX-License-Identifier: Apache-2.0
#pragma once
// Storage policies: where the decoder's and the KV cache's arrays live. Each names its vector
// (`Vec<T>`), how host data gets in and out, and how a weight matrix is held (`Resident<Mat>`).
// HostStorage is std::vector and the Matrix itself: the host backend and the emulator (whose
// "device" memory is host memory) read them in place, with no copies. The device storage
// (backend/device_storage.hpp) holds the same arrays in CUDA device memory.
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "servekit/core/memory_info.hpp"

namespace servekit {

struct HostStorage {
  static constexpr bool is_host = true;
  template <class T>
  using Vec = std::vector<T>;
  template <class Mat>
  using Resident = Mat;
  // What a decoder keeps between steps to run them on this storage: nothing (device storage
  // keeps a stream, staging buffers and captured graphs).
  struct StepContext {
    struct Scope {};
    Scope scope() const { return {}; }
  };

  // Bytes this storage can still allocate: the host's available memory.
  static std::size_t available_bytes() { return host_memory_available(); }

  // A host vector made resident: moved, never copied.
  template <class T>
  static Vec<T> to_vec(std::vector<T>&& v) {
    return std::move(v);
  }
  template <class Mat>
  static Mat resident(Mat&& m) {
    return std::move(m);
  }
  // dst = src (dst resized to src.size()).
  template <class T>
  static void upload(Vec<T>& dst, std::span<const T> src) {
    dst.assign(src.begin(), src.end());
  }
  // dst = the first dst.size() elements of src.
  template <class T>
  static void download(std::span<T> dst, const Vec<T>& src) {
    std::copy_n(src.begin(), dst.size(), dst.begin());
  }
};

template <class S>
concept Storage = requires(typename S::template Vec<float>& v, std::span<const float> h) {
  { S::is_host } -> std::convertible_to<bool>;
  S::upload(v, h);
  { v.data() } -> std::same_as<float*>;
  { v.size() } -> std::convertible_to<std::size_t>;
};

}  // namespace servekit
