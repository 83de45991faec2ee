// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// What every device kernel shares: warp reductions on shuffles (CUB's warp primitives are PTX and
// do not build for the emulator), fp32 <-> cache element conversions, the linear epilogues, and
// the addressing functors that let one attention kernel read a contiguous or a paged cache.
#include <cstdint>
#include <type_traits>

#include "servekit/core/dtype.hpp"
#include "servekit/core/error.hpp"
#include "servekit/kernels/epilogue.hpp"
#include "servekit/kernels/split_k_args.hpp"
#include "servekit/kv/view.hpp"
#include "servekit/simt/simt.hpp"

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

namespace simt = servekit::simt;

__device__ SERVEKIT_SIMT_INLINE float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(simt::kFullMask, v, o);
  return v;
}
__device__ SERVEKIT_SIMT_INLINE float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(simt::kFullMask, v, o));
  return v;
}

// Cache elements are fp32, IEEE half (servekit::half_t has __half's bit layout) or int8 codes
// (kv::I8, times their row's scale: KvDevice::key / value).
__device__ SERVEKIT_SIMT_INLINE float to_f32(float x) {
  return x;
}
__device__ SERVEKIT_SIMT_INLINE float to_f32(int8_t x) {
  return static_cast<float>(x);
}
__device__ SERVEKIT_SIMT_INLINE float to_f32(half_t x) {
  return __half2float(__ushort_as_half(x.bits));
}
__device__ SERVEKIT_SIMT_INLINE void store_f32(float& d, float x) {
  d = x;
}
__device__ SERVEKIT_SIMT_INLINE void store_f32(half_t& d, float x) {
  d.bits = __half_as_ushort(__float2half_rn(x));
}

// GELU, tanh form (HF "gelu_new"), as kernels/ref/gelu.hpp.
__device__ SERVEKIT_SIMT_INLINE float gelu_tanh(float x) {
  constexpr float k = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.f + tanhf(k * (x + 0.044715f * x * x * x)));
}

// v plus the addend's element (m, n), when the linear has one: a LoRA delta that must reach
// the epilogue's input (c_fc's GELU).
__device__ SERVEKIT_SIMT_INLINE float with_addend(float v, const float* add, int m, int n, int N) {
  return add ? v + add[static_cast<int64_t>(m) * N + n] : v;
}

// o (op)= v: the three ways a linear layer writes its output.
template <Epilogue E>
__device__ SERVEKIT_SIMT_INLINE void store_epilogue(float* o, float v) {
  if constexpr (E == Epilogue::Store) *o = v;
  if constexpr (E == Epilogue::Gelu) *o = gelu_tanh(v);
  if constexpr (E == Epilogue::Residual) *o += v;
}

// ---------------------------------------------------------------------------------------------
// KV addressing: (slot, row) -> element offset of that row's C features, the same functions
// the host's kv:: views use (kv/view.hpp).

using kv::ContiguousRows;
using kv::PagedRows;

// One layer of a cache as the kernels see it. key(at) / value(at): the feature at element
// offset `at` in fp32; an int8 cache's code times its row's scale for the head, the same
// product in every kernel, so the decode and prefill kernels still agree to the bit.
template <class T, class Rows>
struct KvDevice {
  using elem_type = T;
  static constexpr bool kInt8 = std::is_same_v<T, int8_t>;
  T* k;
  T* v;
  Rows rows;
  kv::KvScales scales = {};

  __device__ SERVEKIT_SIMT_INLINE float key(int64_t at) const {
    if constexpr (kInt8)
      return to_f32(k[at]) * scales.k[scales.at(at)];
    else
      return to_f32(k[at]);
  }
  __device__ SERVEKIT_SIMT_INLINE float value(int64_t at) const {
    if constexpr (kInt8)
      return to_f32(v[at]) * scales.v[scales.at(at)];
    else
      return to_f32(v[at]);
  }
};

template <class T>
KvDevice<T, ContiguousRows> device_view(const kv::ContiguousView<T>& v) {
  return {v.k, v.v, v.rows(), v.scales};
}
template <class T>
KvDevice<T, PagedRows> device_view(const kv::PagedView<T>& v) {
  return {v.k, v.v, v.rows(), v.scales};
}

__host__ __device__ constexpr int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}
__host__ __device__ constexpr int imin(int a, int b) {
  return a < b ? a : b;
}
__host__ __device__ constexpr int imax(int a, int b) {
  return a > b ? a : b;
}

// The order in which every device linear sums over K. It depends only on (K, N) and the
// kernel family, never on the call's row count M nor on how a launch shares K among blocks, so
// a row gets the same bits from every kernel and launch shape:
//  - K is cut into parts of part_len rows (the last may be short), part sums added in part
//    order, from zero;
//  - a part is cut into `slices` slices of part_len / slices rows, each summed from zero in k
//    order (on tensor cores: its chain of mma steps), slice sums added in slice order, from
//    zero, to give the part's sum.
// Parts exist for decode: a launch with few rows of x gives each (column tile, part) a block of
// its own (split-K), and part_len is chosen so that there are kFillBlocks of them when K is long
// enough. The tiled kernels walk every part and fold where the parts and slices end.
constexpr int kFillBlocks = 264;  // 2 blocks on each of an H100's 132 SMs

struct KOrder {
  int part_len;  // a multiple of granule (below)
  int parts;     // ceil(K / part_len)
  int slices;    // per part
  __host__ __device__ int slice_len() const { return part_len / slices; }
  // Whether the rows k0 .. k0 + step - 1 (inside one slice) end a slice / a part.
  __host__ __device__ bool slice_ends(int k0, int step, int K) const {
    return (k0 + step) % slice_len() == 0 || k0 + step >= K;
  }
  __host__ __device__ bool part_ends(int k0, int step, int K) const {
    return (k0 + step) % part_len == 0 || k0 + step >= K;
  }
};

// The family's order for a (K, N) weight: col_tile output columns per block, parts whose length
// is a multiple of granule (slices x the tiled kernel's k step). One part when the column tiles
// alone fill the GPU.
__host__ __device__ constexpr KOrder k_order(int K, int N, int col_tile, int slices, int granule) {
  const int want = ceil_div(kFillBlocks, ceil_div(N, col_tile));
  int len = ceil_div(K, granule) * granule;  // one part
  if (want > 1) len = imax(granule, K / want / granule * granule);
  return {len, ceil_div(K, len), slices};
}

// A scope in which decode linears take `n` column tiles a block (at most each kernel's most)
// whatever tiles_per_block would choose: for the tests that show the width leaves a row's bits
// alone. Host-side, per thread.
struct ForceTilesPerBlock {
  static inline thread_local int n = 0;  // 0: tiles_per_block chooses
  explicit ForceTilesPerBlock(int v) : before(n) { n = v; }
  ~ForceTilesPerBlock() { n = before; }
  ForceTilesPerBlock(const ForceTilesPerBlock&) = delete;
  ForceTilesPerBlock& operator=(const ForceTilesPerBlock&) = delete;
  int before;
};
// A scope in which the linears ignore a split-K scratch and walk every K part in one block: for
// the benchmarks that show what the split buys. Host-side, per thread.
struct ForceNoSplitK {
  static inline thread_local bool on = false;
  explicit ForceNoSplitK(bool v) : before(on) { on = v; }
  ~ForceNoSplitK() { on = before; }
  ForceNoSplitK(const ForceNoSplitK&) = delete;
  ForceNoSplitK& operator=(const ForceNoSplitK&) = delete;
  bool before;
};
// How many adjacent column tiles a decode linear's block takes (1, 2, 4 .. most): a wider
// block loads x once for all its tiles, so as many as keep the grid at kFillBlocks blocks at one
// row of x, where the issue is filling the SMs, or at kFillBlocks / 2 from two rows on, where
// each block's x is M times larger and its blocks of two or more warps still keep
// kFillBlocks warps in flight. blocks_per_tile: the blocks of one column tile (the K parts).
inline int tiles_per_block(int M, int tiles, int blocks_per_tile, int most) {
  if (ForceTilesPerBlock::n > 0) return imin(ForceTilesPerBlock::n, most);
  const int want = M == 1 ? kFillBlocks : kFillBlocks / 2;
  int w = most;
  while (w > 1 && ceil_div(tiles, w) * blocks_per_tile < want) w /= 2;
  return w;
}

// The split-K scratch a family's launches of up to M rows over a (K, N) weight need: the parts'
// sums (parts x M x N floats; none when K is one part, and at most max_rows rows, the most a
// split launch of the family takes) and one arrival counter per tile of row_tile x col_tile.
struct SplitSize {
  std::size_t floats;
  int counters;
};
inline SplitSize split_size(const KOrder& o, int row_tile, int col_tile, int max_rows, int M,
                            int N) {
  const int rows = imin(M, max_rows);
  return {o.parts > 1 ? static_cast<std::size_t>(o.parts) * rows * N : 0,
          ceil_div(rows, row_tile) * ceil_div(N, col_tile)};
}

// Whether a launch of M rows shares K among blocks: K has several parts, the launch takes at
// most max_rows rows (the family's split tile), the scratch has room for its sums and `tiles`
// arrival counters, and no ForceNoSplitK scope says otherwise. Every linear launcher asks here.
inline bool splits_k(const SplitK& s, const KOrder& o, int M, int max_rows, int N, int tiles) {
  return o.parts > 1 && M <= max_rows && !ForceNoSplitK::on && s.fits(o.parts, M, N, tiles);
}
// The bytes a split launch adds to its record: each part's (M, N) sums written and read back.
inline std::size_t split_k_bytes(bool splits, int parts, int M, int N) {
  return splits ? 2 * static_cast<std::size_t>(M) * N * sizeof(float) * parts : 0;
}

// Called by every thread of block (tile, part) once its part sums of rows m0 .. m0 + rows - 1
// and columns n0 .. n0 + cols - 1 are in s.partial: the last block of the tile adds the parts,
// in part order from zero, then the bias, the addend and the epilogue, as the unsplit kernels do.
template <Epilogue E>
__device__ SERVEKIT_SIMT_INLINE void split_k_finish(const SplitK& s, int parts, int tile, int m0,
                                                    int rows, int n0, int cols, int M, int N,
                                                    const float* b, const float* add, float* out) {
  SERVEKIT_SHARED(int, last);
  __threadfence();  // this block's partial sums are visible before its arrival counts
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&s.arrivals[tile], 1) == parts - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();  // every other block's partial sums are visible to this one
  // volatile: read from L2, not from an L1 line an earlier launch may have left on this SM.
  const volatile float* part = s.partial;
  for (int i = threadIdx.x; i < rows * cols; i += blockDim.x) {
    const int m = m0 + i / cols, n = n0 + i % cols;
    if (m >= M || n >= N) continue;
    float v = 0.f;
    for (int q = 0; q < parts; ++q) v += part[(static_cast<int64_t>(q) * M + m) * N + n];
    store_epilogue<E>(out + static_cast<int64_t>(m) * N + n,
                      with_addend(v + (b ? b[n] : 0.f), add, m, n, N));
  }
  if (threadIdx.x == 0) s.arrivals[tile] = 0;
}

// The global-memory bytes of a linear launch (simt::expect_bytes): the weights, w_bytes, read
// once per tile of row_tile rows of x; x (M, K) read once per tile of col_tile columns; the
// bias, the added (M, N) delta and the residual's (M, N) read; the (M, N) output written.
inline std::size_t linear_bytes(Epilogue e, int M, int K, int N, std::size_t w_bytes, int row_tile,
                                int col_tile, bool bias, bool add) {
  const std::size_t mn = static_cast<std::size_t>(M) * N * sizeof(float);
  return w_bytes * ceil_div(M, row_tile) +
         static_cast<std::size_t>(M) * K * sizeof(float) * ceil_div(N, col_tile) +
         (bias ? static_cast<std::size_t>(N) * sizeof(float) * ceil_div(M, row_tile) : 0) +
         (add ? mn : 0) + (e == Epilogue::Residual ? mn : 0) + mn;
}

// The attention kernels hold a head's features in registers (head_dim / 32 per lane), so
// head_dim is a template argument; this is the one place a runtime value becomes one.
template <class F>
void dispatch_head_dim(int hd, const char* who, int C, int n_head, F&& f) {
  switch (hd) {
    case 16:
      return f.template operator()<16>();
    case 32:
      return f.template operator()<32>();
    case 64:
      return f.template operator()<64>();
    case 128:
      return f.template operator()<128>();
    default:
      fail(who, ": head_dim ", hd, " (C = ", C, ", n_head = ", n_head,
           ") is not one of the supported 16, 32, 64, 128");
  }
}

inline int check_heads(const char* who, int C, int n_head) {
  if (n_head < 1 || C < 1 || C % n_head != 0)
    fail(who, ": C = ", C, " is not a positive multiple of n_head = ", n_head);
  return C / n_head;
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
