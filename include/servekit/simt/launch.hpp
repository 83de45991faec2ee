// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// simt::launch(kernel, grid, block, smem_bytes, stream, args...): kernel<<<grid, block, smem,
// stream>>>(args...) under nvcc; under the emulator, the blocks spread over OS threads, one
// block at a time as threads come free (blocks can differ a lot in cost), each block run by
// block_runner. The threads are the emulator's own ThreadPool (core/thread_pool.hpp), whose
// workers spin 50 us after a launch and then sleep: OpenMP's spin ~10 ms after each loop, and a
// step is hundreds of launches, so beside another busy process (two tests at once on two cores)
// a launch waited a time slice for a worker whose core a spinner held (2.3x slower).
//
// Both check the configuration first and throw LaunchError naming the kernel and the value at
// fault, so a bad launch fails the same way in emulation as on a GPU.
#include "servekit/simt/platform.hpp"

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <utility>

#include <cxxabi.h>

#include "servekit/simt/counters.hpp"
#include "servekit/simt/dim.hpp"
#include "servekit/simt/error.hpp"
#include "servekit/simt/stream.hpp"

#if defined(SERVEKIT_SIMT_HOST)
#include <algorithm>
#include <atomic>
#include <exception>

#include "servekit/core/thread_pool.hpp"
#include "servekit/simt/block_runner.hpp"
#endif

namespace servekit::simt {
inline namespace SERVEKIT_DEVICE_ABI {

inline constexpr std::size_t kDefaultSmemBytes = 48 * 1024;    // without an opt-in
inline constexpr std::size_t kMaxOptInSmemBytes = 227 * 1024;  // sm_80 / sm_90 opt-in ceiling

// A kernel and the name errors and reports use for it.
template <class... P>
struct Kernel {
  void (*fn)(P...);
  std::string_view name;
};

namespace detail {

// "[with auto F = gemm<64, 64>; ...]" -> "gemm<64, 64>"
template <auto F>
std::string_view pretty_name() {
  std::string_view p = __PRETTY_FUNCTION__;
  std::size_t b = p.find("F = ");
  if (b == std::string_view::npos) return p;
  b += 4;
  std::size_t e = p.find_first_of(";]", b);
  std::string_view n = p.substr(b, e - b);
  if (!n.empty() && n.front() == '&') n.remove_prefix(1);
  return n;
}

template <class Fn>
std::string unnamed(Fn fn) {
  int status = 0;
  char* d = abi::__cxa_demangle(typeid(fn).name(), nullptr, nullptr, &status);
  std::string s = std::string("<kernel ") + (status == 0 && d ? d : typeid(fn).name()) + ">";
  std::free(d);
  return s;
}

// Per kernel: its opt-in dynamic shared memory (cudaFuncAttributeMaxDynamicSharedMemorySize)
// and, on the GPU, its static shared memory, asked of the driver once: a cudaFuncGetAttributes
// per launch would cost microseconds on the step's critical path.
struct SmemOptIns {
  std::mutex m;
  std::unordered_map<const void*, std::size_t> bytes;
  std::unordered_map<const void*, std::size_t> static_bytes;
  std::unordered_map<const void*, int> max_threads;  // __launch_bounds__, or what registers allow
};
inline SmemOptIns& smem_opt_ins() {
  static SmemOptIns s;
  return s;
}
struct SmemLimits {
  std::size_t static_bytes, max_dynamic;
  bool opted_in;  // set_max_dynamic_smem was called: static + dynamic may reach the opt-in ceiling
  int max_threads = kMaxBlockThreads;  // the kernel's largest block (GPU only)
  std::size_t total() const { return opted_in ? kMaxOptInSmemBytes : kDefaultSmemBytes; }
};
// Static shared memory is not known on the host (thread_locals): 0 there.
inline SmemLimits smem_limits(const void* fn) {
  auto& s = smem_opt_ins();
  std::lock_guard lock(s.m);
  std::size_t st = 0;
  int max_threads = kMaxBlockThreads;
#if defined(SERVEKIT_SIMT_DEVICE)
  if (auto it = s.static_bytes.find(fn); it != s.static_bytes.end()) {
    st = it->second;
    max_threads = s.max_threads[fn];
  } else {
    cudaFuncAttributes attr{};
    check(cudaFuncGetAttributes(&attr, fn), "cudaFuncGetAttributes");
    st = s.static_bytes[fn] = attr.sharedSizeBytes;
    max_threads = s.max_threads[fn] = attr.maxThreadsPerBlock;
  }
#endif
  auto it = s.bytes.find(fn);
  const bool opted_in = it != s.bytes.end();
  return {st, opted_in ? it->second : kDefaultSmemBytes - std::min(st, kDefaultSmemBytes), opted_in,
          max_threads};
}

inline std::string dims(dim3 d) {
  std::ostringstream os;
  os << '(' << d.x << ',' << d.y << ',' << d.z << ')';
  return os.str();
}

// CUDA's limits (compute capability 8.x/9.x): block at most (1024,1024,64) and 1024 threads,
// grid at most (2^31-1, 65535, 65535), no zero extents.
inline void check_config(std::string_view kernel, dim3 grid, dim3 block, std::size_t smem,
                         std::size_t static_smem, std::size_t max_dyn) {
  if (block.x == 0 || block.y == 0 || block.z == 0)
    throw LaunchError(
        servekit::detail::cat("kernel ", kernel, ": block ", dims(block), " has a zero dimension"));
  if (grid.x == 0 || grid.y == 0 || grid.z == 0)
    throw LaunchError(
        servekit::detail::cat("kernel ", kernel, ": grid ", dims(grid), " has a zero dimension"));
  if (volume(block) > static_cast<unsigned long long>(kMaxBlockThreads))
    throw LaunchError(servekit::detail::cat("kernel ", kernel, ": block ", dims(block), " has ",
                                            volume(block), " threads, more than ",
                                            kMaxBlockThreads));
  if (block.x > 1024 || block.y > 1024 || block.z > 64)
    throw LaunchError(servekit::detail::cat("kernel ", kernel, ": block ", dims(block),
                                            " exceeds the per-dimension limit (1024,1024,64)"));
  if (grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
    throw LaunchError(servekit::detail::cat("kernel ", kernel, ": grid ", dims(grid),
                                            " exceeds the limit (2147483647,65535,65535)"));
  if (smem > max_dyn)
    throw LaunchError(
        servekit::detail::cat("kernel ", kernel, ": ", smem, " bytes of dynamic shared memory (+ ",
                              static_smem, " static) exceed the kernel's limit of ", max_dyn,
                              " dynamic bytes; raise it with simt::set_max_dynamic_smem"));
}

#if defined(SERVEKIT_SIMT_HOST)
// The kernel with its arguments, copied once per launch (CUDA's parameter space); every thread
// calls the kernel with copies of them.
template <class... P>
struct Closure {
  void (*fn)(P...);
  std::tuple<std::remove_cvref_t<P>...> args;
  static void invoke(const void* self) {
    const auto& c = *static_cast<const Closure*>(self);
    std::apply(c.fn, c.args);
  }
};

inline int& worker_count() {
  static int n = 0;  // 0: the host kernels' default (SERVEKIT_THREADS, OMP_NUM_THREADS, CPUs)
  return n;
}

// The emulator's threads: a pool apart from the host kernels' (core/thread_pool.hpp), so that
// set_host_workers does not change how many threads the host kernels use. Sized on first use
// and when the worker count changes; like host_pool, never destroyed.
inline ThreadPool& launch_pool(int workers) {
  static std::mutex m;
  static ThreadPool* pool = nullptr;
  std::lock_guard lock(m);
  if (!pool)
    pool = new ThreadPool(workers);
  else if (pool->threads() != workers)
    pool->resize(workers);  // waits for a launch running on it
  return *pool;
}
#endif

}  // namespace detail

// Allow `kernel` up to `bytes` of dynamic shared memory (at most 227 KiB), like
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes).
template <class... P>
void set_max_dynamic_smem(Kernel<P...> k, std::size_t bytes) {
  if (bytes > kMaxOptInSmemBytes)
    throw LaunchError(servekit::detail::cat("kernel ", k.name, ": dynamic shared memory opt-in of ",
                                            bytes, " bytes exceeds the maximum of ",
                                            kMaxOptInSmemBytes));
#if defined(SERVEKIT_SIMT_DEVICE)
  check(cudaFuncSetAttribute(reinterpret_cast<const void*>(k.fn),
                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
        "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
#endif
  auto& s = detail::smem_opt_ins();
  std::lock_guard lock(s.m);
  s.bytes[reinterpret_cast<const void*>(k.fn)] = bytes;
}
template <class... P>
void set_max_dynamic_smem(void (*fn)(P...), std::size_t bytes) {
  set_max_dynamic_smem(Kernel<P...>{fn, "<unnamed>"}, bytes);
}

// A kernel with an explicit name, for reports.
template <class... P>
Kernel<P...> named(void (*fn)(P...), std::string_view name) {
  return {fn, name};
}
// simt::kernel<my_kernel> / simt::kernel<gemm<64, 64>>: named after the function itself.
template <auto F>
inline const auto kernel = named(F, detail::pretty_name<F>());

#if defined(SERVEKIT_SIMT_HOST)
// Number of OS threads the emulator spreads blocks over (0: the host kernels' default).
inline void set_host_workers(int n) {
  detail::worker_count() = n;
}

// While a DryRun lives, this thread's launches are checked, counted and logged but their
// blocks do not run (copies still do): a program can list the launches of a step of any size
// at no cost, e.g. GPT-2 small at batch 64 (bench/decode_launches.cpp). What the kernels
// would have written stays unwritten.
class DryRun {
 public:
  DryRun() { ++depth(); }
  DryRun(const DryRun&) = delete;
  DryRun& operator=(const DryRun&) = delete;
  ~DryRun() { --depth(); }
  static bool active() { return depth() > 0; }

 private:
  static int& depth() {
    thread_local int d = 0;
    return d;
  }
};
#endif

#if defined(SERVEKIT_SIMT_HOST)
namespace detail {
// Runs every block of a checked launch (now, or when a captured graph runs).
// smem_total: the static + dynamic shared memory a block may use (SmemLimits::total).
template <class... P, class... A>
void run_grid(Kernel<P...> k, dim3 grid, dim3 block, std::size_t smem_bytes, std::size_t smem_total,
              A&&... args) {
  const Closure<P...> closure{k.fn, {std::forward<A>(args)...}};
  const long long n_blocks = static_cast<long long>(volume(grid));
  auto run = [&](long long b) {
    Worker& w = this_worker();
    prepare(w, block, smem_bytes, smem_total);
    w.body = &Closure<P...>::invoke;
    w.closure = &closure;
    run_block(w, k.name, unlinear_index(static_cast<unsigned long long>(b), grid), grid);
  };
  const int workers = worker_count() > 0 ? worker_count() : servekit::detail::default_threads();
  if (n_blocks == 1 || workers == 1) {
    for (long long b = 0; b < n_blocks; ++b) run(b);
    return;
  }
  // The pool's bodies must not throw: the first exception stops the remaining blocks and is
  // rethrown here. Grids past INT_MAX blocks (CUDA allows 2^31-1 x 65535 x 65535) go in slices.
  std::atomic<bool> stop{false};
  std::mutex m;
  std::exception_ptr first;
  ThreadPool& pool = launch_pool(workers);
  constexpr long long kSlice = 1LL << 30;
  for (long long b0 = 0; b0 < n_blocks && !stop; b0 += kSlice) {
    const int n = static_cast<int>(std::min(kSlice, n_blocks - b0));
    pool.parallel_for(
        n,
        [&](int i) {
          if (stop.load(std::memory_order_relaxed)) return;
          try {
            run(b0 + i);
          } catch (...) {
            std::lock_guard lock(m);
            if (!first) first = std::current_exception();
            stop = true;
          }
        },
        1);
  }
  if (first) std::rethrow_exception(first);
}
}  // namespace detail
#endif

template <class... P, class... A>
void launch(Kernel<P...> k, dim3 grid, dim3 block, std::size_t smem_bytes, stream_handle stream,
            A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "simt::launch: wrong number of kernel arguments");
  const void* key = reinterpret_cast<const void*>(k.fn);
#if defined(SERVEKIT_SIMT_DEVICE)
  const detail::SmemLimits lim = detail::smem_limits(key);
  detail::check_config(k.name, grid, block, smem_bytes, lim.static_bytes, lim.max_dynamic);
  // __launch_bounds__ (or the kernel's registers) cap its block below 1024 threads.
  if (volume(block) > static_cast<unsigned long long>(lim.max_threads))
    throw LaunchError(servekit::detail::cat("kernel ", k.name, ": block ", detail::dims(block),
                                            " has ", volume(block),
                                            " threads; the kernel takes at "
                                            "most ",
                                            lim.max_threads, " (__launch_bounds__)"));
  detail::count_launch(k.name, grid, block, smem_bytes);
  k.fn<<<grid, block, smem_bytes, stream>>>(std::forward<A>(args)...);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw LaunchError(servekit::detail::cat(
        "kernel ", k.name, ": launch of grid ", detail::dims(grid), " block ", detail::dims(block),
        " smem ", smem_bytes, " failed: ", cudaGetErrorString(e)));
#else
  // Static __shared__ arrays are thread_locals on the host; their size is not known here.
  const detail::SmemLimits lim = detail::smem_limits(key);
  detail::check_config(k.name, grid, block, smem_bytes, 0, lim.max_dynamic);
  if (detail::g_worker && detail::g_worker->in_block)
    throw LaunchError(servekit::detail::cat("kernel ", k.name,
                                            ": launched from inside a kernel, which the "
                                            "emulator does not support"));
  if (detail::recording(stream, k.name)) {
    // The arguments are copied now, as a captured kernel node's are; so is the name, which
    // may be a temporary's.
    detail::count_launch(k.name, grid, block, smem_bytes);
    detail::capture_slot()->nodes.push_back(
        [fn = k.fn, name = std::string(k.name), grid, block, smem_bytes, smem_total = lim.total(),
         args = std::tuple<std::remove_cvref_t<P>...>(std::forward<A>(args)...)] {
          std::apply(
              [&](const auto&... a) {
                detail::run_grid(Kernel<P...>{fn, name}, grid, block, smem_bytes, smem_total, a...);
              },
              args);
        });
    return;
  }
  detail::count_launch(k.name, grid, block, smem_bytes);
  if (DryRun::active()) return;
  detail::run_grid(k, grid, block, smem_bytes, lim.total(), std::forward<A>(args)...);
#endif
}

template <class... P, class... A>
void launch(void (*fn)(P...), dim3 grid, dim3 block, std::size_t smem_bytes, stream_handle stream,
            A&&... args) {
  const std::string name = detail::unnamed(fn);
  launch(Kernel<P...>{fn, name}, grid, block, smem_bytes, stream, std::forward<A>(args)...);
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::simt
