// SPDX-License-Identifier: Apache-2.0
#pragma once
// DeviceStep: what a decoder on device storage keeps to run its steps. One stream every kernel
// and copy of a step is ordered on; the staging buffer its host-built arrays go up in (one
// copy); the pinned buffer its results come back in (one copy, the step's one wait); and the
// decode steps it captured as CUDA graphs, one per (cache, rows, kind, shape), replayed with
// one call.
//
// A key's first step runs eagerly, which grows every buffer and workspace to its shape; the
// second is captured and every later one replays. A graph holds device addresses, so when any
// device or pinned buffer of the process was freed since the last step (a buffer grew, a cache
// went away), every graph is dropped and recaptured.
#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "servekit/simt/counters.hpp"
#include "servekit/simt/graph.hpp"
#include "servekit/simt/memory.hpp"
#include "servekit/simt/staging.hpp"
#include "servekit/simt/stream.hpp"

namespace servekit::backend {

class DeviceStep {
 public:
  // What a graph's launches depend on: the cache it reads and writes (its addresses), the
  // step's rows, which outputs it makes (the caller's numbering), and whatever else of the
  // step decides its launches and their arguments (`shape`: a LoRA step's, model/gpt2.hpp).
  struct Key {
    const void* cache;
    int rows, kind;
    std::vector<int32_t> shape;
    auto operator<=>(const Key&) const = default;
  };
  // Keys seen at most (every key is in warmed_, captured or not); past that all are dropped
  // and the steps captured again. Without LoRA a model has a few hundred keys at most; with
  // it the shapes (which adapters share a step) need not repeat.
  static constexpr std::size_t kMaxKeys = 1024;

  simt::StagingBuffer in;    // the step's host-built arrays
  simt::StagingBuffer late;  // arrays the host builds while the step's kernels run (masks)

  // Makes the step's stream current while it lives: every operation of the step enqueues there.
  simt::StreamScope scope() const { return simt::StreamScope(stream_); }
  simt::stream_handle stream() const { return stream_; }

  // Whether decode steps are captured and replayed (default: on).
  void set_graphs(bool on) {
    graphs_on_ = on;
    if (!on) graphs_.clear(), warmed_.clear();
  }
  bool graphs() const { return graphs_on_; }
  std::size_t graphs_captured() const { return graphs_.size(); }

  // Uploads `in` and runs enqueue() (the step's kernels, on the current stream): eagerly, or,
  // for a key, through its graph. A key promises that enqueue's launches and their arguments
  // depend only on the key and on addresses that stay put while nothing is freed.
  template <class Fn>
  void run(std::optional<Key> key, Fn&& enqueue) {
    run(key, in, std::forward<Fn>(enqueue));
  }
  // The same with another of the step's staging buffers uploaded first (`late`: a masked
  // step's masks and pick are a second graph, after the forward's).
  template <class Fn>
  void run(std::optional<Key> key, simt::StagingBuffer& up, Fn&& enqueue) {
    const simt::StreamScope s(stream_);
    up.reserve_device();
    if (!key || !graphs_on_) {
      up.upload(stream_);
      enqueue();
      return;
    }
    if (const long long frees = simt::counts().frees; frees != frees_seen_) {
      graphs_.clear(), warmed_.clear();
      frees_seen_ = frees;
    }
    auto it = graphs_.find(*key);
    if (it == graphs_.end() && warmed_.size() >= kMaxKeys) {
      graphs_.clear(), warmed_.clear();
    }
    if (it == graphs_.end()) {
      if (warmed_.insert(*key).second) {  // first sight: eager, sizing what it uses
        up.upload(stream_);
        enqueue();
        return;
      }
      it = graphs_
               .emplace(*key, simt::capture(stream_,
                                            [&] {
                                              up.upload(stream_);
                                              enqueue();
                                            }))
               .first;
    }
    it->second.launch(stream_);
  }

  // Room for steps that stage up to in_bytes (and late_bytes late) and download up to
  // out_bytes.
  void reserve(std::size_t in_bytes, std::size_t out_bytes, std::size_t late_bytes = 0) {
    in.reserve(in_bytes);
    if (late_bytes > 0) late.reserve(late_bytes);
    out_.grow(out_bytes);
  }
  // Waits for everything enqueued on the step's stream.
  void wait() const { stream_.synchronize(); }
  // (n) elements of device memory after the step, in pinned memory valid until the next
  // download: one copy, and the host's one wait for the step.
  template <class T>
  std::span<const T> download(const T* src, std::size_t n) {
    out_.grow(n * sizeof(T));
    T* dst = reinterpret_cast<T*>(out_.data());
    simt::copy_to_host(dst, src, n, stream_);
    return {dst, n};
  }

 private:
  simt::PinnedBuffer<std::byte> out_;  // downloaded results
  // Ordered with the default stream both ways, so that a buffer resized or a block table
  // mirrored there between steps needs no event.
  simt::Stream stream_{true};
  bool graphs_on_ = true;
  std::map<Key, simt::Graph> graphs_;
  std::set<Key> warmed_;
  long long frees_seen_ = -1;
};

}  // namespace servekit::backend
