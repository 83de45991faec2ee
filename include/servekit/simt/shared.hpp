// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// Shared memory, typed, on both compilers.
//  - Dynamic (the third launch parameter): on the GPU the one `extern __shared__` array; on the
//    host a per-OS-thread buffer sized by the launch, filled with 0xff bytes per block so that
//    reading it before writing it gives NaNs, not lucky zeros.
//  - Static: SERVEKIT_SHARED(T, name) declares `T name` in shared memory. On the GPU that is
//    `__shared__ T name`. On the host a plain `__shared__` is a thread_local, which keeps the
//    previous block's values (or zeros) where a GPU holds garbage; SERVEKIT_SHARED fills it with
//    0xff bytes at the start of every block, as dynamic shared memory is, so a kernel that
//    reads before it writes fails here too.
#include "servekit/simt/platform.hpp"

#include <algorithm>
#include <cstddef>
#include <new>
#include <type_traits>

#if defined(SERVEKIT_SIMT_HOST)
#include <cstring>

#include "servekit/simt/block_runner.hpp"
#include "servekit/simt/error.hpp"
#endif

namespace servekit::simt {
inline namespace SERVEKIT_DEVICE_ABI {

template <class T>
__device__ SERVEKIT_SIMT_INLINE T* dynamic_smem() {
#if defined(SERVEKIT_SIMT_DEVICE)
  extern __shared__ __align__(16) unsigned char servekit_simt_dynamic_smem[];
  return reinterpret_cast<T*>(servekit_simt_dynamic_smem);
#else
  return reinterpret_cast<T*>(detail::g_worker->dynamic_smem);
#endif
}

namespace detail {
template <class T>
using type_t = T;  // lets `type_t<float[8][8]> name` declare an array

#if defined(SERVEKIT_SIMT_HOST)
// A block reached `bytes` more of static shared memory: refused as the GPU would refuse it,
// at compile time past 48 KiB, at launch past the kernel's static + dynamic limit.
inline void count_static_smem(Worker& w, std::size_t bytes) {
  w.static_smem_bytes += bytes;
  if (w.static_smem_bytes > kMaxStaticSmemBytes)
    throw LaunchError(servekit::detail::cat(
        "kernel ", w.kernel, ": ", w.static_smem_bytes, " bytes of static shared memory exceed ",
        kMaxStaticSmemBytes, "; past 48 KiB use dynamic shared memory and set_max_dynamic_smem"));
  if (w.static_smem_bytes + w.dynamic_smem_bytes > w.smem_total_limit)
    throw LaunchError(servekit::detail::cat(
        "kernel ", w.kernel, ": ", w.static_smem_bytes, " bytes of static shared memory + ",
        w.dynamic_smem_bytes, " dynamic exceed its limit of ", w.smem_total_limit,
        " bytes; raise it with simt::set_max_dynamic_smem"));
}

// One static shared variable of one kernel (Tag: a lambda type unique to its declaration) on
// this OS thread, poisoned when a new block first reaches it.
template <class T, class Tag>
SERVEKIT_SIMT_INLINE T& static_smem(Tag) {
  static_assert(std::is_trivially_destructible_v<T>, "servekit: shared memory holds plain data");
  struct Slot {
    alignas(std::max<std::size_t>(16, alignof(T))) unsigned char bytes[sizeof(T)];
    std::uint64_t epoch = 0;
  };
  static thread_local Slot slot;
  Worker& w = *g_worker;
  if (slot.epoch != w.block_epoch) {
    std::memset(slot.bytes, 0xff, sizeof(T));
    slot.epoch = w.block_epoch;
    count_static_smem(w, sizeof(T));
  }
  return *std::launder(reinterpret_cast<T*>(slot.bytes));
}
#endif
}  // namespace detail

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::simt

#if defined(SERVEKIT_SIMT_DEVICE)
#define SERVEKIT_SHARED(T, name) __shared__ __align__(16)::servekit::simt::detail::type_t<T> name
#else
#define SERVEKIT_SHARED(T, name) \
  ::servekit::simt::detail::type_t<T>& name = ::servekit::simt::detail::static_smem<T>([] {})
#endif
