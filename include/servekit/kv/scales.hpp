// SPDX-License-Identifier: Apache-2.0
#pragma once
// An int8 cache's scales (kv::I8): a float per token and head of every cached row, for K and V,
// laid out like the rows themselves so that a row's element offset finds its scale
// (kv::KvScales::at). Other element types store nothing: the empty specialisation.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "servekit/core/error.hpp"
#include "servekit/core/storage.hpp"
#include "servekit/kv/view.hpp"

namespace servekit::kv {

template <class T, Storage S>
class KvScaleStore {  // f32 and f16 caches: no scales
 public:
  KvScaleStore(int, int, int) {}
  void resize(std::size_t) {}
  KvScales view(int) { return {}; }
  std::size_t bytes() const { return 0; }
  std::size_t bytes_per_token() const { return 0; }
  static std::size_t token_bytes(int /*n_layer*/, int /*n_head*/) { return 0; }
};

template <Storage S>
class KvScaleStore<int8_t, S> {
 public:
  // One scale per head: group = C / n_head features (n_head 1: one per row).
  KvScaleStore(int n_layer, int n_embd, int n_head)
      : n_layer_(n_layer), groups_(n_head), group_(n_head > 0 ? n_embd / n_head : 0) {
    if (n_head < 1 || n_embd % n_head != 0)
      fail("kv cache: an int8 cache needs n_head >= 1 dividing n_embd = ", n_embd, ", got ",
           n_head);
  }
  // rows: the cache's rows per layer (slots x max_len, or blocks x block_tokens).
  void resize(std::size_t rows) {
    rows_ = rows;
    data_.resize(2 * static_cast<std::size_t>(n_layer_) * rows * groups_);
  }
  KvScales view(int layer) {
    float* base = data_.data() + 2 * static_cast<std::size_t>(layer) * rows_ * groups_;
    return {base, base + rows_ * groups_, group_};
  }
  std::size_t bytes() const { return data_.size() * sizeof(float); }
  std::size_t bytes_per_token() const { return token_bytes(n_layer_, groups_); }
  // What a cached token's scales cost, before a store exists (the engine's memory plan).
  static std::size_t token_bytes(int n_layer, int n_head) {
    return 2ull * n_layer * n_head * sizeof(float);
  }

 private:
  int n_layer_, groups_, group_;
  std::size_t rows_ = 0;
  typename S::template Vec<float> data_;  // (L, 2, rows, n_head)
};

}  // namespace servekit::kv
