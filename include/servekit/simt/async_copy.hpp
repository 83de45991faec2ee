// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// Asynchronous copies from global to shared memory (sm_80's cp.async), which let a kernel fetch
// the next tiles of a K loop while it multiplies the current one:
//
//   cp_async_16(dst, src, n)  start copying 16 bytes: n from src, the rest zeros (n = 0: src is
//                             not read, the bytes are zeroed; the edge of a matrix)
//   cp_async_commit()         close the copies started since the last commit into a group
//   cp_async_wait<N>()        wait until at most the N newest groups are still in flight
//
// A copy is only known to have landed after the wait that covers its group, and only in the
// thread that started it: other threads see it after a __syncthreads that follows the wait.
// Under nvcc these are the PTX instructions. Under the emulator each thread keeps its copies
// and performs them at the wait, the latest moment a GPU may: a read of the destination before
// it sees the shared memory's poison (0xff bytes, a NaN) or an older tile, not lucky data, so a
// missing or short wait shows up in results. Under the Random schedule (simt/schedule.hpp)
// about half the copies land as they are started instead, the earliest moment: a buffer
// refilled while another thread still reads it (a missing __syncthreads before the refill)
// then shows up too.
#include "servekit/simt/platform.hpp"

#include <cstdint>

#if defined(SERVEKIT_SIMT_HOST)
#include <cstring>
#include <string>

#include "servekit/simt/block_runner.hpp"
#endif

namespace servekit::simt {
inline namespace SERVEKIT_DEVICE_ABI {

__device__ SERVEKIT_SIMT_INLINE void cp_async_16(void* smem, const void* gmem, int src_bytes = 16) {
#if defined(SERVEKIT_SIMT_DEVICE)
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
               "r"(src_bytes));
#else
  // What the GPU would fault on (a misaligned address) or what PTX leaves undefined.
  if (reinterpret_cast<std::uintptr_t>(smem) % 16 || reinterpret_cast<std::uintptr_t>(gmem) % 16)
    throw Error("simt::cp_async_16: shared " +
                std::to_string(reinterpret_cast<std::uintptr_t>(smem)) + " and global " +
                std::to_string(reinterpret_cast<std::uintptr_t>(gmem)) +
                " must both be 16-byte aligned");
  if (src_bytes < 0 || src_bytes > 16)
    throw Error("simt::cp_async_16: copies 0 to 16 source bytes, not " + std::to_string(src_bytes));
  detail::Worker& w = *detail::g_worker;
  const detail::AsyncCopy c{static_cast<unsigned char*>(smem),
                            static_cast<const unsigned char*>(gmem), src_bytes};
  if (w.schedule.order == Order::Random && w.copy_lands_now()) return detail::AsyncCopies::land(c);
  w.async[static_cast<std::size_t>(w.current)].open.push_back(c);
  w.async_used = true;
#endif
}

__device__ SERVEKIT_SIMT_INLINE void cp_async_commit() {
#if defined(SERVEKIT_SIMT_DEVICE)
  asm volatile("cp.async.commit_group;\n" ::);
#else
  detail::Worker& w = *detail::g_worker;
  detail::AsyncCopies& a = w.async[static_cast<std::size_t>(w.current)];
  a.group_ends.push_back(a.open.size());
#endif
}

template <int N>
__device__ SERVEKIT_SIMT_INLINE void cp_async_wait() {
  static_assert(N >= 0 && N <= 7, "cp.async.wait_group takes 0 to 7");
#if defined(SERVEKIT_SIMT_DEVICE)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#else
  detail::Worker& w = *detail::g_worker;
  w.async[static_cast<std::size_t>(w.current)].land(N);
#endif
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::simt
