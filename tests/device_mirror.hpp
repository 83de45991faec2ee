// SPDX-License-Identifier: Apache-2.0
#pragma once
// on(v), on(p, n): host data as a kernel's argument. A test that launches a kernel directly
// writes `kn::sample({on(ids), nullptr, on(x), on(rows), M, V})`; each on() copies its data
// into a device buffer and, unless the data is const, copies it back when the full expression
// ends, after the launch (both on the null stream, in order). Under the emulator device
// memory is host memory and a raw pointer would do; the copies are there so that the same
// source, compiled by nvcc for the GPU bundle, hands the kernels device memory.
#include <cstddef>
#include <span>
#include <type_traits>
#include <vector>

#include "servekit/simt/memory.hpp"

namespace device_test {

template <class T>
class Mirror {
  using U = std::remove_const_t<T>;

 public:
  Mirror(T* host, std::size_t n) : host_(host), n_(n) {
    if (n_ == 0) return;  // a launcher refuses the shape before it reads anything
    buf_ = servekit::simt::DeviceBuffer<U>(n_);
    buf_.upload(std::span<const U>(host_, n_));
  }
  Mirror(const Mirror&) = delete;
  Mirror& operator=(const Mirror&) = delete;
  ~Mirror() noexcept(false) {
    if constexpr (!std::is_const_v<T>)
      if (n_ > 0) buf_.download(std::span<U>(host_, n_));
  }
  operator T*() const { return buf_.data(); }

 private:
  T* host_;
  std::size_t n_;
  servekit::simt::DeviceBuffer<U> buf_;
};

template <class T>
Mirror<T> on(std::vector<T>& v) {
  return {v.data(), v.size()};
}
template <class T>
Mirror<const T> on(const std::vector<T>& v) {
  return {v.data(), v.size()};
}
template <class T>
Mirror<T> on(T* p, std::size_t n) {
  return {p, n};
}

}  // namespace device_test
