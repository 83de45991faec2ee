// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// What every LoRA kernel reads, the host oracle (kernels/ref/lora.hpp) and the device kernels
// (kernels/lora.hpp) alike: one adapter's matrices for one linear (in -> out), and one linear's
// delta over a batch of rows.
#include <cstdint>

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

struct LoraMats {
  const float* a = nullptr;  // (rank, K); nullptr: the adapter leaves this linear alone
  const float* b = nullptr;  // (Nout, rank)
  int rank = 0;
  float scale = 0;
  // b transposed and packed in blocks of kBtCols columns, the layout the host kernels stream
  // (kernels/lora_bt.hpp): block c holds (rank, kBtCols) contiguously, the last one
  // padded with zeros; host storage only
  const float* bt = nullptr;
  // fp16 or bf16 copies for the tensor-core segmented kernels (kernels/lora_mma.hpp), device
  // storage of a 16-bit composition only: a16 (rank, K), b16 (Nout, rank rounded up to even,
  // the pad zero) so that every pair of ranks a fragment register takes is one aligned word
  const std::uint16_t* a16 = nullptr;
  const std::uint16_t* b16 = nullptr;

  // Does the adapter change this linear (in whichever storage it is held)?
  SERVEKIT_HD bool present() const { return a != nullptr || a16 != nullptr; }
};

// The tensor-core shrink (kernels/lora_mma.hpp) cuts K into parts of kLoraMmaPartK, each
// summed into its own slice of the scratch v, (N, max_rank) floats a part, the last one to
// finish adding them into slice 0: the model sizes v by the widest K's parts.
inline constexpr int kLoraMmaPartK = 256;
inline constexpr int kLoraMmaRanks = 16;  // rank rows a shrink block takes
SERVEKIT_HD constexpr int lora_mma_parts(int K) {
  return (K + kLoraMmaPartK - 1) / kLoraMmaPartK;
}
// Its counters (LoraParams::arrivals) for N rows of up to max_rank: one a (row, kLoraMmaRanks
// ranks) where K comes in several parts, none where it comes in one.
SERVEKIT_HD constexpr std::int64_t lora_mma_counters(int N, int max_rank, int parts) {
  return parts > 1 ? std::int64_t(N) * ((max_rank + kLoraMmaRanks - 1) / kLoraMmaRanks) : 0;
}

struct LoraParams {
  float* y;             // (N, Nout), added to (or written: `write`)
  const float* x;       // (N, K)
  const int32_t* ad;    // (N) adapter slot of each row, -1: none
  const LoraMats* tab;  // (n_slots) this linear's matrices per slot
  int n_slots;
  float* v;  // (N, max_rank) scratch (device kernels; the tensor-core ones: parts of it)
  int N, K, Nout, max_rank;
  int only = -1;  // loop: only the rows of this slot
  // segmented, device kernels: the rows grouped by adapter (the host sorts them once a step)
  const int32_t* order = nullptr;      // (N) rows, grouped by adapter
  const int32_t* seg_start = nullptr;  // (n_seg + 1) bounds in `order`
  const int32_t* seg_ad = nullptr;     // (n_seg) slot of each segment
  int n_seg = 0;
  int seg_rows = 0;   // the longest segment's rows (0: as many as N)
  int seg_chunk = 0;  // rows of a segment one block takes (the launcher sets it)
  // y written (0 + delta; 0 for a row without one) rather than added to, so that a delta
  // buffer needs no zeroing launch first (gathered and segmented device kernels; segmented
  // then needs `order` to list every row: the grouped ones, then the others)
  bool write = false;
  // The tensor-core shrink's counters at zero, lora_mma_counters of them where K has several
  // parts (lora_mma_parts): the last part of a chunk to arrive adds them.
  int32_t* arrivals = nullptr;
};

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
