// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// A split-K linear launch's scratch (kernels/common.hpp's split_k_finish), owned by the decoder
// and handed to the device linears: plain pointers, so the decoder names it without the kernels.
#include <cstddef>
#include <cstdint>

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

// Each block (column tile, part) writes its part's sums to `partial`, and the block that arrives
// last at its tile's counter adds the parts in order and runs the epilogue (the CUDA
// "threadFenceReduction" pattern). Counters start at zero and the last block sets its own back,
// so one workspace serves every launch of a stream and a replayed graph. Null: no split.
struct SplitK {
  float* partial = nullptr;     // (parts, M, N)
  int32_t* arrivals = nullptr;  // (column tiles)
  std::size_t floats = 0;       // of partial
  int counters = 0;             // of arrivals
  bool fits(int parts, int M, int N, int tiles) const {
    return partial && arrivals && static_cast<std::size_t>(parts) * M * N <= floats &&
           tiles <= counters;
  }
};

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
