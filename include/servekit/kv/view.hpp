// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the attention kernels see of one layer of a cache: plain pointers and integers, no
// allocation, no bookkeeping. A kernel asks a view where (slot, row) lives and nothing else, so
// the same kernel serves every layout. The addressing (ContiguousRows, PagedRows) is written
// once, for the host and the device kernels alike.
#include <cstdint>

#include "servekit/core/divider.hpp"
#include "servekit/core/hd.hpp"

namespace servekit::kv {

// (slot, row) -> element offset of that row's C features.
struct ContiguousRows {
  int64_t slot_stride;  // max_len * C
  int32_t C;
  SERVEKIT_HD SERVEKIT_FORCE_INLINE int64_t operator()(int32_t slot, int32_t row) const {
    return slot * slot_stride + static_cast<int64_t>(row) * C;
  }
};

// A row's block is row / B by a multiply (Divider): a hardware division by the run-time B held
// 16.8% of a paged decode row's weighted-sum samples on a Zen 4 (docs/PERFORMANCE.md).
struct PagedRows {
  const int32_t* block_table;  // (slots, table_stride)
  int32_t table_stride;
  Divider block_tokens;  // B
  int32_t C;
  SERVEKIT_HD SERVEKIT_FORCE_INLINE int64_t operator()(int32_t slot, int32_t row) const {
    const int32_t i = block_tokens.quot(row);
    const int32_t block = block_table[static_cast<int64_t>(slot) * table_stride + i];
    return (static_cast<int64_t>(block) * block_tokens.d + (row - i * block_tokens.d)) * C;
  }
};

// An int8 cache's scales (kv::I8): one float per `group` features of a row, at element offset
// / group, in arrays beside k and v. group is a multiple of the head width, so a (row, head)
// has one scale: scale(offset(slot, t) + h * hd). Other element types: none (nullptr).
struct KvScales {
  float* k = nullptr;
  float* v = nullptr;
  int32_t group = 0;
  SERVEKIT_HD SERVEKIT_FORCE_INLINE int64_t at(int64_t offset) const { return offset / group; }
};

// Slot s, row t starts at s * slot_stride + t * C in k and v.
template <class T>
struct ContiguousView {
  using elem_type = T;
  T* k;
  T* v;
  int64_t slot_stride;  // max_len * C
  int32_t C;
  KvScales scales = {};
  ContiguousRows rows() const { return {slot_stride, C}; }
  int64_t offset(int32_t slot, int32_t row) const { return rows()(slot, row); }
};

// Slot s, row t lives in block block_table[s * table_stride + t / B] at row t % B. One block
// table row per slot (vLLM's layout) rather than flashinfer's batch-compacted
// indptr/indices/last_page_len: every kernel row carries its slot, so the lookup is O(1) and a
// step that grows or releases one sequence rewrites only that sequence's row.
template <class T>
struct PagedView {
  using elem_type = T;
  T* k;                        // (n_blocks, B, C)
  T* v;                        // (n_blocks, B, C)
  const int32_t* block_table;  // (slots, table_stride), -1 where no block is held
  int32_t table_stride;        // ceil(max_len / B)
  Divider block_tokens;        // B
  int32_t C;
  KvScales scales = {};
  PagedRows rows() const { return {block_table, table_stride, block_tokens, C}; }
  int64_t offset(int32_t slot, int32_t row) const { return rows()(slot, row); }
};

}  // namespace servekit::kv
