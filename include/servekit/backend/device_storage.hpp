// SPDX-License-Identifier: Apache-2.0
#pragma once
// DeviceStorage: the decoder's and the KV cache's arrays in device memory (simt::DeviceVector)
// and weight matrices as weights::DeviceMatrix, uploaded once at load. The Cuda backend's
// storage; under the host compiler device memory is host memory, so the same code runs (and is
// tested) under the emulator.
#include <span>
#include <vector>

#include "servekit/backend/device_step.hpp"
#include "servekit/simt/memory.hpp"
#include "servekit/weights/device_matrix.hpp"

namespace servekit::backend {

struct DeviceStorage {
  static constexpr bool is_host = false;
  template <class T>
  using Vec = simt::DeviceVector<T>;
  template <class Mat>
  using Resident = weights::DeviceMatrix<weights::format_of<Mat>>;
  using StepContext = DeviceStep;  // the stream, staging, results and graphs of the steps

  // Bytes of device memory free now (under the emulator: the host's available memory).
  static std::size_t available_bytes() { return simt::device_memory_available(); }

  template <class T>
  static Vec<T> to_vec(std::vector<T>&& v) {
    return Vec<T>(std::span<const T>(v));
  }
  template <class Mat>
  static Resident<Mat> resident(Mat&& m) {
    return Resident<Mat>::upload(m);
  }
  // Both ordered on the current stream (simt::StreamScope); a download waits for it.
  template <class T>
  static void upload(Vec<T>& dst, std::span<const T> src) {
    dst.assign(src, simt::current_stream());
  }
  template <class T>
  static void download(std::span<T> dst, const Vec<T>& src) {
    src.download(dst, simt::current_stream());
  }
};

}  // namespace servekit::backend
