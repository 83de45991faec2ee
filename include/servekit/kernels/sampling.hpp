// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// Next-token selection on the device, so a step copies back M token ids (and their logprobs)
// instead of M x V floats. Each row has its own parameters (RowSampling), so one launch serves
// a batch of requests that each sample their own way. Greedy: the argmax of the row; ties go to
// the lowest index, as serve::argmax does; NaN and -inf are never chosen. Sampling: HF's warper
// order (temperature, then top-k keeping ties with the k-th value, then top-p), without sorting
// the vocabulary: each threshold is found by bisection on the logits' ordered bits, one block
// reduction per step. The draw is sample_uniform(seed, index), the host sampler's too.
#include <cmath>

#include "servekit/core/philox.hpp"
#include "servekit/kernels/common.hpp"
#include "servekit/kernels/sampling_args.hpp"

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

struct ArgmaxParams {
  int32_t* ids;         // (M)
  const float* logits;  // (M, V)
  int M, V;
};

namespace argmax_cfg {
constexpr int kThreads = 256, kWarps = kThreads / 32;
}

// (value, index) a beats b: larger value, or equal value and lower index.
__device__ SERVEKIT_SIMT_INLINE bool beats(float va, int ia, float vb, int ib) {
  return va > vb || (va == vb && ia < ib);
}

template <int kUnused = 0>
__global__ void __launch_bounds__(argmax_cfg::kThreads) argmax_kernel(const ArgmaxParams p) {
  using namespace argmax_cfg;
  SERVEKIT_SHARED(float[kWarps], sv);
  SERVEKIT_SHARED(int[kWarps], si);
  const int m = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float* row = p.logits + static_cast<int64_t>(m) * p.V;
  float best = -INFINITY;
  int idx = p.V;  // "none yet": loses every tie against a real index
  for (int v = threadIdx.x; v < p.V; v += kThreads)
    if (beats(row[v], v, best, idx)) best = row[v], idx = v;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(simt::kFullMask, best, o);
    const int oi = __shfl_xor_sync(simt::kFullMask, idx, o);
    if (beats(ov, oi, best, idx)) best = ov, idx = oi;
  }
  if (lane == 0) sv[warp] = best, si[warp] = idx;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w)
      if (beats(sv[w], si[w], best, idx)) best = sv[w], idx = si[w];
    // A row of NaNs / -inf only: fall back to index 0, as max_element would.
    p.ids[m] = idx < p.V ? idx : 0;
  }
}

inline void argmax(const ArgmaxParams& p, simt::stream_handle stream = nullptr) {
  if (p.M < 1 || p.V < 1) fail("kernels::argmax: cannot run M = ", p.M, ", V = ", p.V);
  simt::expect_bytes(static_cast<std::size_t>(p.M) * (p.V * sizeof(float) + sizeof(int32_t)));
  simt::launch(simt::kernel<argmax_kernel<>>, dim3(p.M), dim3(argmax_cfg::kThreads), 0, stream, p);
}

using servekit::philox4x32_10;
using servekit::sample_uniform;
using servekit::U32x4;

// ---------------------------------------------------------------------------------------------

struct SampleParams {
  int32_t* ids;             // (M); -1 where the row has no number above -inf
  float* logprobs;          // (M) log_softmax(logits)[ids] (raw logits, no temperature), or null
  const float* logits;      // (M, V); NaN counts as -inf
  const RowSampling* rows;  // (M) each row's parameters (checked with check_row)
  int M, V;
};

namespace sample_cfg {
// One warp per row up to this vocabulary (<= 32 logits a lane: barriers cost more than the
// loads), 256 threads above it (GPT-2's 50257: ~200 logits a thread per pass).
constexpr int kSmallV = 1024, kSmallThreads = 32, kLargeThreads = 256;
}  // namespace sample_cfg

// Logit after temperature, with NaN -> -inf and -0 -> +0, so that equal values have equal keys.
__device__ SERVEKIT_SIMT_INLINE float sample_scaled(float x, float temperature) {
  const float z = x / temperature;  // HF divides; the same division on every pass
  return z == z ? (z == 0.f ? 0.f : z) : -INFINITY;
}
// Monotone map float -> uint32: a < b  <=>  key(a) < key(b) for non-NaN values.
__device__ SERVEKIT_SIMT_INLINE uint32_t order_key(float z) {
  const uint32_t b = __float_as_uint(z);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

struct SumOp {
  template <class T>
  __device__ SERVEKIT_SIMT_INLINE T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  template <class T>
  __device__ SERVEKIT_SIMT_INLINE T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};
struct MinOp {
  template <class T>
  __device__ SERVEKIT_SIMT_INLINE T operator()(T a, T b) const {
    return a < b ? a : b;
  }
};

// The block's reduction of v, returned to every thread. Warps combine in index order, so the
// result is the same float on every call with the same inputs (the bisections rely on it).
template <int kWarps, class T, class Op>
__device__ SERVEKIT_SIMT_INLINE T block_reduce(T v, T* scratch /* (kWarps) */, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(simt::kFullMask, v, o));
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < kWarps; ++w) v = op(v, scratch[w]);
  __syncthreads();  // scratch is reused by the next reduction
  return v;
}

template <int kThreads>
struct SampleShared {
  static constexpr int kWarps = kThreads / 32;
  float f[kWarps];
  int i[kWarps];
};

// One block per row. Every pass re-reads the row (L1/L2 on a GPU); nothing of size V is stored.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) sample_kernel(const SampleParams p) {
  constexpr int kWarps = kThreads / 32;
  static_assert(kThreads % 32 == 0 && kThreads <= 1024);
  SERVEKIT_SHARED(SampleShared<kThreads>, sh);
  const int m = blockIdx.x, tid = threadIdx.x, lane = tid % 32, warp = tid / 32, V = p.V;
  const float* row = p.logits + static_cast<int64_t>(m) * V;  // (V)
  const RowSampling rs = p.rows[m];

  // The argmax of the raw logits (NaN and -inf never win; ties to the lowest index): greedy's
  // token, and the shift of the log-softmax.
  float best = -INFINITY;
  int idx = V;  // "none yet": loses every tie against a real index
  for (int v = tid; v < V; v += kThreads)
    if (row[v] > -INFINITY && beats(row[v], v, best, idx)) best = row[v], idx = v;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(simt::kFullMask, best, o);
    const int oi = __shfl_xor_sync(simt::kFullMask, idx, o);
    if (beats(ov, oi, best, idx)) best = ov, idx = oi;
  }
  if (lane == 0) sh.f[warp] = best, sh.i[warp] = idx;
  __syncthreads();
  best = sh.f[0], idx = sh.i[0];
  for (int w = 1; w < kWarps; ++w)
    if (beats(sh.f[w], sh.i[w], best, idx)) best = sh.f[w], idx = sh.i[w];
  __syncthreads();
  if (idx == V) {  // nothing to choose from: the host reports it
    if (tid == 0) {
      p.ids[m] = -1;
      if (p.logprobs) p.logprobs[m] = NAN;
    }
    return;
  }
  float lse = 0.f;  // log sum exp(logits - best)
  if (p.logprobs) {
    float s = 0.f;
    for (int v = tid; v < V; v += kThreads)
      if (row[v] == row[v]) s += expf(row[v] - best);
    lse = logf(block_reduce<kWarps>(s, sh.f, SumOp{}));
  }
  auto finish = [&](int pick) {
    if (tid == 0) {
      p.ids[m] = pick;
      if (p.logprobs) p.logprobs[m] = row[pick] - best - lse;
    }
  };
  // Greedy, or a +inf logit, which takes all the mass.
  if (rs.temperature == 0.f || best == INFINITY) return finish(idx);

  const float T = rs.temperature;
  // When best / T overflows (a tiny T), exp(z - zmax) would be inf - inf = NaN for every token:
  // then the logits are scaled as (x - best) / T, the host sampler's formula, so the maxima
  // get weight 1 and the rest next to none. Otherwise x / T, unshifted (the same bits as ever).
  const float q = best / T;
  const float shift = q == INFINITY || q == -INFINITY ? best : 0.f;
  const float zmax = sample_scaled(best - shift, T);  // x / T is monotone: the largest scaled
  // Unnormalised probability of v if its key is kept (>= thr); the max always is (e = 1).
  auto weight = [&](int v, uint32_t thr) {
    const float z = sample_scaled(row[v] - shift, T);
    return order_key(z) >= thr ? expf(z - zmax) : 0.f;
  };
  auto kept_mass = [&](uint32_t thr) {
    float s = 0.f;
    for (int v = tid; v < V; v += kThreads) s += weight(v, thr);
    return block_reduce<kWarps>(s, sh.f, SumOp{});
  };

  // top-k: the largest key t with #{key >= t} >= k is the k-th largest value's key; every logit
  // equal to it stays. Bits are set from the top while the count allows, 32 exact steps.
  uint32_t thr = 0;
  if (rs.top_k > 0 && rs.top_k < V) {
    for (int b = 31; b >= 0; --b) {
      const uint32_t c = thr | (1u << b);
      int n = 0;
      for (int v = tid; v < V; v += kThreads) n += order_key(sample_scaled(row[v] - shift, T)) >= c;
      if (block_reduce<kWarps>(n, sh.i, SumOp{}) >= rs.top_k) thr = c;
    }
  }
  // top-p over the top-k survivors: the largest key t whose kept mass still reaches top_p of
  // theirs, i.e. the smallest set of highest logits with that mass (ties at the edge all stay).
  // A candidate at or below the top-k key sums the same terms in the same order as `mass`, so it
  // always passes and the bisection never drops below the top-k set.
  if (rs.top_p < 1.f) {
    const float target = rs.top_p * kept_mass(thr);
    uint32_t t = 0;
    for (int b = 31; b >= 0; --b) {
      const uint32_t c = t | (1u << b);
      if (kept_mass(c > thr ? c : thr) >= target) t = c;
    }
    thr = t > thr ? t : thr;
  }

  // The draw: thread `tid` owns logits [lo, hi) so that a block scan of the owners' sums
  // gives every token's cumulative mass in index order; the token is the first kept one whose
  // cumulative mass exceeds u x total.
  const int chunk = ceil_div(V, kThreads), lo = imin(V, tid * chunk), hi = imin(V, lo + chunk);
  float own = 0.f;
  int last = -1;  // last kept index with a nonzero weight: the draw if rounding overshoots
  for (int v = lo; v < hi; ++v) {
    const float e = weight(v, thr);
    if (e > 0.f) own += e, last = v;
  }
  float incl = own;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float t = __shfl_up_sync(simt::kFullMask, incl, o);
    if (lane >= o) incl += t;
  }
  float excl = __shfl_up_sync(simt::kFullMask, incl, 1);
  if (lane == 0) excl = 0.f;
  if (lane == 31) sh.f[warp] = incl;
  __syncthreads();
  float total = 0.f, before = 0.f;
  for (int w = 0; w < kWarps; ++w) {
    if (w == warp) before = total;
    total += sh.f[w];
  }
  __syncthreads();
  const float target = sample_uniform(rs.seed, rs.index) * total;
  float run = before + excl;
  int pick = V;
  for (int v = lo; v < hi; ++v) {
    const float e = weight(v, thr);
    if (e > 0.f && (run += e) > target) {
      pick = v;
      break;
    }
  }
  pick = block_reduce<kWarps>(pick, sh.i, MinOp{});
  last = block_reduce<kWarps>(last, sh.i, MaxOp{});
  // The max always keeps weight 1, so some token is kept; the argmax guards the index anyway.
  finish(pick < V ? pick : last >= 0 ? last : idx);
}

// Each row greedy or one draw, with its own parameters; ids (and logprobs) stay on the device.
inline void sample(const SampleParams& p, simt::stream_handle stream = nullptr) {
  if (p.M < 1 || p.V < 1) fail("kernels::sample: cannot run M = ", p.M, ", V = ", p.V);
  if (p.rows == nullptr) fail("kernels::sample: rows is null; every row needs its parameters");
  using namespace sample_cfg;
  // Each block's row of logits, counted once (its passes re-read it from L1/L2); its
  // parameters; the id and logprob written.
  simt::expect_bytes(static_cast<std::size_t>(p.M) *
                     (p.V * sizeof(float) + sizeof(RowSampling) + sizeof(int32_t) + sizeof(float)));
  if (p.V <= kSmallV)
    simt::launch(simt::kernel<sample_kernel<kSmallThreads>>, dim3(p.M), dim3(kSmallThreads), 0,
                 stream, p);
  else
    simt::launch(simt::kernel<sample_kernel<kLargeThreads>>, dim3(p.M), dim3(kLargeThreads), 0,
                 stream, p);
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
