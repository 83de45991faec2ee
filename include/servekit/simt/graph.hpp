// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// CUDA graphs, one API on both compilers: simt::capture(stream, fn) runs fn with `stream` in
// capture mode and returns the work fn issued there as a Graph; graph.launch(stream) replays it
// with one call. Under nvcc: cudaStreamBeginCapture (thread-local mode), cudaStreamEndCapture,
// cudaGraphInstantiate, cudaGraphLaunch. Under the emulator the kernels and copies issued to
// `stream` become nodes (the arguments copied at capture, as CUDA copies them), run in order by
// launch(); what a capture forbids throws CaptureError (simt/stream.hpp): a synchronisation, an
// allocation or free, a copy back to the host, work on any other stream, and a captured copy
// from pageable memory. So a test proves without a GPU that a step can be captured.
//
//   simt::Graph g = simt::capture(stream, [&] { upload(stream); kernels(stream); });
//   for (...) { write_pinned_inputs(); g.launch(stream); download(stream); }
#include "servekit/simt/platform.hpp"

#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

#include "servekit/simt/counters.hpp"
#include "servekit/simt/error.hpp"
#include "servekit/simt/stream.hpp"

namespace servekit::simt {
inline namespace SERVEKIT_DEVICE_ABI {

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&& o) noexcept { swap(o); }
  Graph& operator=(Graph&& o) noexcept {
    if (this != &o) {
      Graph t(std::move(o));
      swap(t);
    }
    return *this;
  }
  ~Graph() {
#if defined(SERVEKIT_SIMT_DEVICE)
    if (exec_) cudaGraphExecDestroy(exec_);
#endif
  }

  // Kernels and copies recorded.
  std::size_t nodes() const {
    return n_nodes_;
  }
  bool empty() const {
    return n_nodes_ == 0;
  }

  // Runs the recorded work on stream s, after what was issued there before.
  void launch(stream_handle s) const {
    if (empty()) fail("simt::Graph::launch: the graph is empty (nothing was captured)");
#if defined(SERVEKIT_SIMT_DEVICE)
    auto& c = detail::counter_state();
    detail::count(c.graph_launches);
    detail::count(c.h2d, copies_.h2d), detail::count(c.h2d_bytes, copies_.h2d_bytes);
    check(cudaGraphLaunch(exec_, s), "cudaGraphLaunch");
#else
    (void)s;
    detail::forbid_in_capture("simt::Graph::launch");
    detail::count(detail::counter_state().graph_launches);
    for (const auto& node : nodes_) node();
#endif
  }

 private:
  template <class Fn>
  friend Graph capture(stream_handle s, Fn&& fn);
  void swap(Graph& o) noexcept {
#if defined(SERVEKIT_SIMT_DEVICE)
    std::swap(exec_, o.exec_);
    std::swap(copies_, o.copies_);
#else
    std::swap(nodes_, o.nodes_);
#endif
    std::swap(n_nodes_, o.n_nodes_);
  }
#if defined(SERVEKIT_SIMT_DEVICE)
  cudaGraphExec_t exec_ = nullptr;
  detail::CaptureTally copies_;  // the copies up it makes, counted at each launch
#else
  std::vector<std::function<void()> > nodes_;
#endif
  std::size_t n_nodes_ = 0;
};

// Captures the work fn issues to stream s (not the default stream) into a Graph; nothing of it
// runs. If fn throws, the capture ends and the exception propagates.
template <class Fn>
Graph capture(stream_handle s, Fn&& fn) {
  if (!s) throw CaptureError("simt::capture: the default stream cannot be captured");
  Graph g;
#if defined(SERVEKIT_SIMT_DEVICE)
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  cudaGraph_t graph = nullptr;
  detail::CaptureTally tally{s};
  detail::capture_tally() = &tally;
  try {
    fn();
  } catch (...) {
    detail::capture_tally() = nullptr;
    cudaStreamEndCapture(s, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  detail::capture_tally() = nullptr;
  g.copies_ = tally;
  check(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
  std::size_t n = 0;
  const cudaError_t e = cudaGraphGetNodes(graph, nullptr, &n);
  const cudaError_t i = e == cudaSuccess ? cudaGraphInstantiate(&g.exec_, graph, 0) : e;
  cudaGraphDestroy(graph);
  check(i, "cudaGraphInstantiate");
  g.n_nodes_ = n;
#else
  if (detail::capture_slot())
    throw CaptureError("simt::capture: this thread is already capturing a stream");
  detail::Capture c{s, {}};
  detail::capture_slot() = &c;
  try {
    fn();
  } catch (...) {
    detail::capture_slot() = nullptr;
    throw;
  }
  detail::capture_slot() = nullptr;
  g.n_nodes_ = c.nodes.size();
  g.nodes_ = std::move(c.nodes);
#endif
  return g;
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::simt
