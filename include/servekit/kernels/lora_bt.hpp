// SPDX-License-Identifier: Apache-2.0
#pragma once
// LoraMats::bt, the layout of B the host LoRA kernels stream (kernels/host/lora.hpp): B^T in
// blocks of kBtCols columns, block c holding (rank, kBtCols) floats contiguously, the last one
// padded with zeros. Rows of a plain (rank, Nout) B^T a whole Nout apart fall in one L1 set
// when Nout * 4 bytes is a multiple of 4 KB (c_fc's 3072): the expand's pass over 16 of them
// evicted its own lines and ran at a third of one core's FMA peak (docs/PERFORMANCE.md).
#include <cstddef>
#include <vector>

namespace servekit::kernels {

inline constexpr int kBtCols = 16;

// B (Nout, rank) as LoraMats::bt: rank x round_up(Nout, kBtCols) floats.
inline std::vector<float> pack_bt(const float* b, int Nout, int rank) {
  const int blocks = (Nout + kBtCols - 1) / kBtCols;
  std::vector<float> bt(static_cast<std::size_t>(blocks) * rank * kBtCols, 0.f);
  for (int n = 0; n < Nout; n++)
    for (int j = 0; j < rank; j++)
      bt[(static_cast<std::size_t>(n / kBtCols) * rank + j) * kBtCols + n % kBtCols] =
          b[static_cast<std::size_t>(n) * rank + j];
  return bt;
}

}  // namespace servekit::kernels
