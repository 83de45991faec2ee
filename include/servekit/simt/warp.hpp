// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// Warp-level ops: __syncwarp, the four shuffles, ballot/any/all. Under nvcc these are CUDA's own.
//
// On the host the lanes of a warp run one after another, so a warp op is a rendezvous: each lane
// leaves its operand and the address of its result, parks, and the last lane of the mask to
// arrive does the exchange for all of them. Code that relies on lanes running in lockstep
// without a __syncwarp breaks here exactly as it does on Volta and later GPUs.
#include "servekit/simt/platform.hpp"

#if defined(SERVEKIT_SIMT_HOST)
#include <bit>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>

#include "servekit/simt/block_runner.hpp"

namespace servekit::simt {
inline namespace SERVEKIT_DEVICE_ABI {
namespace detail {

// A shuffle's qualifiers in one word: width in the low byte, operand bytes in the next.
constexpr unsigned shfl_qual(int width, std::size_t bytes) {
  return static_cast<unsigned>(width & 0xff) | static_cast<unsigned>(bytes) << 8;
}
inline std::string describe_qual(unsigned q) {
  if (q == 0) return "no qualifiers";
  return "width " + std::to_string(q & 0xff) + ", " + std::to_string(q >> 8) + "-byte operand";
}

// Arrive at a warp op with mask `mask`; returns once `fn` has run for every lane of the mask.
// Lanes beyond the block's last thread do not exist and are dropped from the mask; a lane that
// has returned stays in it, and the op then never completes (reported as a deadlock). `qual`:
// what else the lanes must agree on (a shuffle's width and operand size). A lane arriving at
// another op, or other qualifiers, with the mask of an op its lanes wait at is an error: on a
// GPU that is undefined (a hang, or values exchanged between unrelated instructions).
SERVEKIT_SIMT_INLINE void warp_exchange(unsigned mask, const char* op, WarpExchangeFn fn,
                                        const void* in, void* out, unsigned qual = 0) {
  Worker& w = *g_worker;
  const int me = w.current;
  const int lane = me & (kWarpSize - 1);
  const unsigned bit = 1u << lane;
  WarpState& ws = w.warps[static_cast<std::size_t>(me / kWarpSize)];
  const unsigned lanes = mask & ws.existing;
  if (!(lanes & bit)) {
    std::ostringstream os;
    os << op << ": thread " << me << " (lane " << lane << ") calls it with mask 0x" << std::hex
       << mask << ", which does not include its lane";
    throw Error(os.str());
  }
  ws.slots[lane] = LaneSlot{in, out};
  if (lanes == bit) {
    fn(lanes, ws.slots);
    return;
  }
  // The lanes of one op pass the same literal as op: equal pointers need no strcmp (which was a
  // tenth of an emulated decode step's time).
  int k = 0;
  while (k < ws.n_pending && ws.pending[k].mask != lanes) ++k;
  if (k == ws.n_pending) {
    ws.pending[ws.n_pending++] = WarpState::Pending{fn, op, qual, lanes, 0};
  } else if (const WarpState::Pending& p = ws.pending[k];
             p.fn != fn || p.qual != qual || (p.op != op && std::strcmp(p.op, op) != 0)) {
    std::ostringstream os;
    os << op << ": thread " << me << " (lane " << lane << ") arrives with mask 0x" << std::hex
       << lanes << " while lanes 0x" << p.arrived << " wait at " << p.op << " with that mask; "
       << describe_qual(p.qual) << " there, " << describe_qual(qual)
       << " here (the lanes of a warp op must all call it with the same mask and qualifiers)";
    throw Error(os.str());
  }
  ws.pending[k].arrived |= bit;
  if (ws.pending[k].arrived != lanes) {
    w.state[static_cast<std::size_t>(me)] = ThreadState::AtWarpOp;
    w.wait[static_cast<std::size_t>(me)] = WaitSite{op, lanes, nullptr, 0};
    switch_away(w, me);
    return;  // the last lane has written our result
  }
  ws.pending[k] = ws.pending[--ws.n_pending];
  fn(lanes, ws.slots);
  const int base = me - lane;
  for (unsigned rest = lanes & ~bit; rest; rest &= rest - 1) {
    const int t = base + std::countr_zero(rest);
    w.state[static_cast<std::size_t>(t)] = ThreadState::Ready;
    w.ready.push(t);
  }
}

inline void exchange_nothing(unsigned, const LaneSlot*) {}

// A shuffle lane's operand: its value's bits and the lane it reads, computed by the PTX rule.
struct ShflIn {
  std::uint64_t bits;
  int src;
};

inline void exchange_shfl(unsigned lanes, const LaneSlot* s) {
  for (unsigned rest = lanes; rest; rest &= rest - 1) {
    const int l = std::countr_zero(rest);
    const auto* in = static_cast<const ShflIn*>(s[l].in);
    // Reading a lane outside the mask is undefined in CUDA; the emulator returns the caller's
    // own value, as the GPU does for an out-of-segment source.
    const int src = (lanes >> in->src) & 1u ? in->src : l;
    *static_cast<std::uint64_t*>(s[l].out) = static_cast<const ShflIn*>(s[src].in)->bits;
  }
}

inline void exchange_vote(unsigned lanes, const LaneSlot* s) {
  unsigned ballot = 0;
  for (unsigned rest = lanes; rest; rest &= rest - 1) {
    const int l = std::countr_zero(rest);
    if (*static_cast<const int*>(s[l].in)) ballot |= 1u << l;
  }
  for (unsigned rest = lanes; rest; rest &= rest - 1)
    *static_cast<unsigned*>(s[std::countr_zero(rest)].out) = ballot;
}

enum class ShflMode { Idx, Up, Down, Bfly };

// The source lane of shfl.sync (PTX ISA, "shfl.sync"), with c = ((32 - width) << 8) | clamp as
// CUDA's __shfl_*_sync pass it: segments of `width` lanes; up/down stay inside the segment,
// xor may read an earlier segment but not a later one; an invalid source means "own value".
SERVEKIT_SIMT_INLINE int shfl_source(ShflMode mode, int lane, int b, int width) {
  b &= 31;  // PTX reads b[4:0]: an offset of 33 is an offset of 1
  const int segmask = (kWarpSize - width) & 31;
  const int clamp = mode == ShflMode::Up ? 0 : 31;
  const int max_lane = (lane & segmask) | (clamp & ~segmask);
  const int min_lane = lane & segmask;
  int j = lane;
  bool valid = true;
  switch (mode) {
    case ShflMode::Idx:
      j = min_lane | (b & ~segmask);
      valid = j <= max_lane;
      break;
    case ShflMode::Up:
      j = lane - b;
      valid = j >= max_lane;
      break;
    case ShflMode::Down:
      j = lane + b;
      valid = j <= max_lane;
      break;
    case ShflMode::Bfly:
      j = lane ^ b;
      valid = j <= max_lane;
      break;
  }
  return valid ? j : lane;
}

template <class T>
SERVEKIT_SIMT_INLINE T shfl(unsigned mask, T var, ShflMode mode, int b, int width, const char* op) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8,
                "shuffles move values of at most 8 bytes");
  ShflIn in{0, shfl_source(mode, g_worker->current & (kWarpSize - 1), b, width)};
  std::memcpy(&in.bits, &var, sizeof(T));
  std::uint64_t out = 0;
  warp_exchange(mask, op, &exchange_shfl, &in, &out, shfl_qual(width, sizeof(T)));
  T r;
  std::memcpy(&r, &out, sizeof(T));
  return r;
}

SERVEKIT_SIMT_INLINE unsigned vote(unsigned mask, int pred, const char* op) {
  unsigned ballot = 0;
  warp_exchange(mask, op, &exchange_vote, &pred, &ballot);
  return ballot;
}

}  // namespace detail
}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::simt

SERVEKIT_SIMT_INLINE void __syncwarp(unsigned mask = 0xffffffffu) {
  servekit::simt::detail::warp_exchange(
      mask, "__syncwarp", &servekit::simt::detail::exchange_nothing, nullptr, nullptr);
}

template <class T>
SERVEKIT_SIMT_INLINE T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize) {
  using namespace servekit::simt::detail;
  return shfl(mask, var, ShflMode::Idx, src_lane, width, "__shfl_sync");
}
template <class T>
SERVEKIT_SIMT_INLINE T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  using namespace servekit::simt::detail;
  return shfl(mask, var, ShflMode::Up, static_cast<int>(delta), width, "__shfl_up_sync");
}
template <class T>
SERVEKIT_SIMT_INLINE T __shfl_down_sync(unsigned mask, T var, unsigned delta,
                                        int width = warpSize) {
  using namespace servekit::simt::detail;
  return shfl(mask, var, ShflMode::Down, static_cast<int>(delta), width, "__shfl_down_sync");
}
template <class T>
SERVEKIT_SIMT_INLINE T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize) {
  using namespace servekit::simt::detail;
  return shfl(mask, var, ShflMode::Bfly, lane_mask, width, "__shfl_xor_sync");
}

SERVEKIT_SIMT_INLINE unsigned __ballot_sync(unsigned mask, int pred) {
  return servekit::simt::detail::vote(mask, pred, "__ballot_sync");
}
SERVEKIT_SIMT_INLINE int __any_sync(unsigned mask, int pred) {
  return servekit::simt::detail::vote(mask, pred, "__any_sync") != 0;
}
SERVEKIT_SIMT_INLINE int __all_sync(unsigned mask, int pred) {
  using namespace servekit::simt::detail;
  const unsigned lanes =
      mask & g_worker->warps[static_cast<std::size_t>(g_worker->current / 32)].existing;
  return vote(mask, pred, "__all_sync") == lanes;
}

namespace servekit::simt {
inline namespace SERVEKIT_DEVICE_ABI {
// The calling thread's lane in its warp.
SERVEKIT_SIMT_INLINE unsigned lane_id() {
  return linear_index(threadIdx, blockDim) % 32u;
}
}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::simt

#else
namespace servekit::simt {
inline namespace SERVEKIT_DEVICE_ABI {
__device__ __forceinline__ unsigned lane_id() {
  unsigned r;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(r));
  return r;
}
}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::simt
#endif
