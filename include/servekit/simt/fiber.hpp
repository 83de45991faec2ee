// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// One CUDA thread on the host = one fiber: a 64 KiB stack and a boost.context fcontext. fcontext
// switches in ~4 ns; glibc's ucontext makes a signal-mask syscall per switch (~180 ns).
//
// A fiber is created once and reused for every block its worker runs (it loops over kernel
// bodies), and it never leaves the OS thread that created it: thread_locals (threadIdx,
// __shared__) and C++ exception state are per OS thread.
#include "servekit/simt/platform.hpp"
#if defined(SERVEKIT_SIMT_HOST)
#include <cstddef>
#include <cstdint>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/detail/fcontext.hpp>

#include "servekit/simt/error.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define SERVEKIT_SIMT_ASAN 1
#endif

namespace servekit::simt {
inline namespace SERVEKIT_DEVICE_ABI {
namespace detail {

using boost::context::detail::fcontext_t;
using boost::context::detail::jump_fcontext;
using boost::context::detail::make_fcontext;
using boost::context::detail::transfer_t;

inline constexpr std::size_t kFiberStackBytes = 64 * 1024;

// The memory a context runs on; ASan needs it to follow a switch.
struct StackSpan {
  const void* lo = nullptr;
  std::size_t size = 0;
};

// The OS thread's own stack, for switches back to the worker's main context.
inline StackSpan this_thread_stack() {
  StackSpan s;
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* lo = nullptr;
    std::size_t size = 0;
    pthread_attr_getstack(&attr, &lo, &size);
    pthread_attr_destroy(&attr);
    s = {lo, size};
  }
  return s;
}

// Leaves the running context (its resume point goes to *from_slot) for `to`. Every switch passes
// the address of the slot, and the side that wakes up stores the context it came from there: a
// suspended context is known only once it has been left.
SERVEKIT_SIMT_INLINE void switch_context(fcontext_t* from_slot, fcontext_t to,
                                         [[maybe_unused]] const StackSpan& to_stack) {
#if defined(SERVEKIT_SIMT_ASAN)
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, to_stack.lo, to_stack.size);
#endif
  transfer_t t = jump_fcontext(to, from_slot);
  *static_cast<fcontext_t*>(t.data) = t.fctx;
#if defined(SERVEKIT_SIMT_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
}

// First instructions of a fresh fiber: the counterpart of switch_context's second half.
inline void on_fiber_entry(transfer_t t) {
  *static_cast<fcontext_t*>(t.data) = t.fctx;
#if defined(SERVEKIT_SIMT_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
}

class Fiber {
 public:
  // `index` staggers the stack top by (index % 64) * 64 bytes: page-aligned tops make every
  // fiber's hot frame map to the same L1 sets (SGEMM 38.6 -> 22.8 ms when staggered).
  Fiber(int index, void (*entry)(transfer_t)) : entry_(entry) {
    page_ = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    map_bytes_ = kFiberStackBytes + page_;
    void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (p == MAP_FAILED) fail("simt: cannot map a ", kFiberStackBytes, "-byte fiber stack");
    base_ = static_cast<char*>(p);
    // Guard page below the stack: an overflow faults instead of corrupting the next fiber
    // (-fstack-clash-protection makes a large frame touch it at entry instead of jumping it).
    mprotect(base_, page_, PROT_NONE);
    top_ = base_ + map_bytes_ - static_cast<std::size_t>(index % 64) * 64;
    reset();
  }
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;
  ~Fiber() {
#if defined(SERVEKIT_SIMT_ASAN)
    // A fiber ends suspended, so its frames' redzones are still poisoned; left so, they would
    // poison whatever is mapped here next (another thread's stack and thread_locals).
    __asan_unpoison_memory_region(base_ + page_, map_bytes_ - page_);
#endif
    munmap(base_, map_bytes_);
  }

  // Restart from the entry function, abandoning whatever was suspended on the stack (after a
  // deadlock or an exception, the other threads of the block are never resumed).
  void reset() {
    const std::size_t usable = static_cast<std::size_t>(top_ - (base_ + page_));
#if defined(SERVEKIT_SIMT_ASAN)
    // Abandoned frames leave their redzones poisoned.
    __asan_unpoison_memory_region(base_ + page_, usable);
#endif
    ctx = make_fcontext(top_, usable, entry_);
  }

  StackSpan stack() const {
    return {base_ + page_, static_cast<std::size_t>(top_ - base_ - page_)};
  }

  fcontext_t ctx = nullptr;  // where the fiber resumes

 private:
  void (*entry_)(transfer_t);
  char* base_ = nullptr;
  char* top_ = nullptr;
  std::size_t page_ = 0;
  std::size_t map_bytes_ = 0;
};

}  // namespace detail
}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::simt
#endif
