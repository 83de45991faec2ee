// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// atomicAdd / Sub / Max / Min / Exch / CAS / And / Or / Xor for the host. Blocks run concurrently
// on several OS threads, so these are real atomics (std::atomic_ref, relaxed like CUDA's).
// simt::atomic_max / atomic_min for float work on both compilers (a CAS loop on the GPU, which
// has no native float max).
#include "servekit/simt/platform.hpp"

#include <cstdint>

#include "servekit/simt/math.hpp"

#if defined(SERVEKIT_SIMT_HOST)
#include <atomic>

namespace servekit::simt {
inline namespace SERVEKIT_DEVICE_ABI {
namespace detail {
template <class T>
SERVEKIT_SIMT_INLINE std::atomic_ref<T> atomic_at(T* p) {
  return std::atomic_ref<T>(*p);
}
template <class T>
SERVEKIT_SIMT_INLINE T fetch_max(T* p, T v) {
  auto a = atomic_at(p);
  T old = a.load(std::memory_order_relaxed);
  while (old < v && !a.compare_exchange_weak(old, v, std::memory_order_relaxed)) {
  }
  return old;
}
template <class T>
SERVEKIT_SIMT_INLINE T fetch_min(T* p, T v) {
  auto a = atomic_at(p);
  T old = a.load(std::memory_order_relaxed);
  while (v < old && !a.compare_exchange_weak(old, v, std::memory_order_relaxed)) {
  }
  return old;
}
template <class T>
SERVEKIT_SIMT_INLINE T cas(T* p, T compare, T val) {
  atomic_at(p).compare_exchange_strong(compare, val, std::memory_order_relaxed);
  return compare;  // the old value either way
}
constexpr auto relaxed = std::memory_order_relaxed;
}  // namespace detail
}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::simt

#define SERVEKIT_SIMT_ATOMIC_ARITH(T)                                                          \
  SERVEKIT_SIMT_INLINE T atomicAdd(T* p, T v) {                                                \
    return servekit::simt::detail::atomic_at(p).fetch_add(v, servekit::simt::detail::relaxed); \
  }                                                                                            \
  SERVEKIT_SIMT_INLINE T atomicExch(T* p, T v) {                                               \
    return servekit::simt::detail::atomic_at(p).exchange(v, servekit::simt::detail::relaxed);  \
  }
SERVEKIT_SIMT_ATOMIC_ARITH(int)
SERVEKIT_SIMT_ATOMIC_ARITH(unsigned)
SERVEKIT_SIMT_ATOMIC_ARITH(unsigned long long)
SERVEKIT_SIMT_ATOMIC_ARITH(float)
#undef SERVEKIT_SIMT_ATOMIC_ARITH
SERVEKIT_SIMT_INLINE double atomicAdd(double* p, double v) {
  return servekit::simt::detail::atomic_at(p).fetch_add(v, servekit::simt::detail::relaxed);
}

#define SERVEKIT_SIMT_ATOMIC_INT(T)                                                            \
  SERVEKIT_SIMT_INLINE T atomicSub(T* p, T v) {                                                \
    return servekit::simt::detail::atomic_at(p).fetch_sub(v, servekit::simt::detail::relaxed); \
  }                                                                                            \
  SERVEKIT_SIMT_INLINE T atomicMax(T* p, T v) {                                                \
    return servekit::simt::detail::fetch_max(p, v);                                            \
  }                                                                                            \
  SERVEKIT_SIMT_INLINE T atomicMin(T* p, T v) {                                                \
    return servekit::simt::detail::fetch_min(p, v);                                            \
  }                                                                                            \
  SERVEKIT_SIMT_INLINE T atomicCAS(T* p, T c, T v) {                                           \
    return servekit::simt::detail::cas(p, c, v);                                               \
  }                                                                                            \
  SERVEKIT_SIMT_INLINE T atomicAnd(T* p, T v) {                                                \
    return servekit::simt::detail::atomic_at(p).fetch_and(v, servekit::simt::detail::relaxed); \
  }                                                                                            \
  SERVEKIT_SIMT_INLINE T atomicOr(T* p, T v) {                                                 \
    return servekit::simt::detail::atomic_at(p).fetch_or(v, servekit::simt::detail::relaxed);  \
  }                                                                                            \
  SERVEKIT_SIMT_INLINE T atomicXor(T* p, T v) {                                                \
    return servekit::simt::detail::atomic_at(p).fetch_xor(v, servekit::simt::detail::relaxed); \
  }
SERVEKIT_SIMT_ATOMIC_INT(int)
SERVEKIT_SIMT_ATOMIC_INT(unsigned)
SERVEKIT_SIMT_ATOMIC_INT(unsigned long long)
#undef SERVEKIT_SIMT_ATOMIC_INT
SERVEKIT_SIMT_INLINE long long atomicMax(long long* p, long long v) {
  return servekit::simt::detail::fetch_max(p, v);
}
SERVEKIT_SIMT_INLINE long long atomicMin(long long* p, long long v) {
  return servekit::simt::detail::fetch_min(p, v);
}
SERVEKIT_SIMT_INLINE unsigned short atomicCAS(unsigned short* p, unsigned short c,
                                              unsigned short v) {
  return servekit::simt::detail::cas(p, c, v);
}
#endif

namespace servekit::simt {
inline namespace SERVEKIT_DEVICE_ABI {

// Float max/min by compare-and-swap on the bits; returns the old value. NaN inputs are ignored.
__device__ SERVEKIT_SIMT_INLINE float atomic_max(float* p, float v) {
  unsigned* bits = reinterpret_cast<unsigned*>(p);
  unsigned old = *reinterpret_cast<volatile unsigned*>(bits);
  for (;;) {
    const float cur = __uint_as_float(old);
    if (!(cur < v)) return cur;
    const unsigned seen = atomicCAS(bits, old, __float_as_uint(v));
    if (seen == old) return cur;
    old = seen;
  }
}
__device__ SERVEKIT_SIMT_INLINE float atomic_min(float* p, float v) {
  unsigned* bits = reinterpret_cast<unsigned*>(p);
  unsigned old = *reinterpret_cast<volatile unsigned*>(bits);
  for (;;) {
    const float cur = __uint_as_float(old);
    if (!(v < cur)) return cur;
    const unsigned seen = atomicCAS(bits, old, __float_as_uint(v));
    if (seen == old) return cur;
    old = seen;
  }
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::simt
