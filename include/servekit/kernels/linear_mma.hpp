// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// out = epilogue(x @ W + b) for fp16 or bf16 W stored (K, N), on tensor cores
// (mma.sync.m16n8k16, fp32 accumulate). A block of 2 x kWn warps computes a (32 x 32 kWn) tile
// of out (kWn = 2, or 4 for decode launches with columns to spare: x is then staged once for
// twice the columns); warp (wm, wn) owns rows 16 wm.. and columns 32 wn.., i.e. four m16n8
// accumulators, and sums them the same way whatever kWn. Per BK = 32 slice of K, x is
// converted to the weights' 16-bit type as it is staged (the only rounding beyond fp32: see the
// test's tolerance) and W is copied as raw 16-bit words; fragments come from shared memory
// through ldmatrix (A straight, B transposed, since W is k-major).
// The K loop is a kStages-deep pipeline: W's tile for slice i + kStages - 1 is fetched with
// cp.async (16 bytes a copy, straight to shared memory) while slice i is multiplied, so a block
// keeps two tiles of W in flight instead of waiting on each; one __syncthreads per slice.
// K is summed in mma_order (common.hpp's order, one slice a part): each part's mma chain starts
// from zero and the part sums are added in order on CUDA cores. A launch of at most
// kSplitRows = 4 BM rows with a SplitK workspace takes one block per (row tile, column tile,
// part), >= kFillBlocks = 264 blocks for every GPT-2 small linear, and the last block of a tile
// adds the parts; larger launches walk every part in one block. Either way a row gets the same
// bits, whatever M.
#include "servekit/kernels/common.hpp"

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

struct LinearB16Params {
  float* out;              // (M, N)
  const float* x;          // (M, K)
  const std::uint16_t* w;  // (K, N) fp16 or bf16 bits
  const float* b;          // (N) or nullptr
  int M, K, N;
  const float* add = nullptr;  // (M, N) added before the epilogue (a LoRA delta), or nullptr
};

namespace mma_gemm {
constexpr int BM = 32, BN = 64, BK = 32;  // BN: the column tile of the order and of the split
constexpr int kThreads = 128;             // kWn = 2; 64 kWn in general
constexpr int kMaxWide = 2;               // column tiles a block takes at most (kWn = 4)
constexpr int kStages = 3;                // slices in shared memory: one multiplied, two in flight
constexpr int kSplitRows = 4 * BM;  // the most rows a split launch takes (a verify of 16 x 5 rows)
constexpr int kChunk = 8;           // 16-bit words per 16-byte cp.async
// Rows padded by 8 halves (16 bytes): ldmatrix's eight row addresses then fall in different
// banks, and every row start stays 16-byte aligned as ldmatrix requires.
constexpr int kPad = 8;
template <int kBN>
struct SharedStorage {
  std::uint16_t a[kStages][BM][BK + kPad];   // x tiles (M, K), 16-bit
  std::uint16_t b[kStages][BK][kBN + kPad];  // W tiles (K, N)
};
static_assert((BK + kPad) * 2 % 16 == 0 && (BN + kPad) * 2 % 16 == 0 &&
              (kMaxWide * BN + kPad) * 2 % 16 == 0);
}  // namespace mma_gemm

// fp32 -> 16-bit bits, round to nearest even, and the matching mma.
template <bool kBf16>
__device__ SERVEKIT_SIMT_INLINE std::uint16_t to_b16(float x) {
  if constexpr (kBf16)
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  else
    return __half_as_ushort(__float2half_rn(x));
}
template <bool kBf16>
__device__ SERVEKIT_SIMT_INLINE void mma16816(float d[4], const std::uint32_t a[4],
                                              const std::uint32_t b[2]) {
  if constexpr (kBf16)
    simt::mma_m16n8k16_bf16f32(d, a, b, d);
  else
    simt::mma_m16n8k16_f16f32(d, a, b, d);
}

// The tensor-core order: parts of a multiple of BK rows, one block per 64 columns.
inline KOrder mma_order(int K, int N) {
  return k_order(K, N, mma_gemm::BN, 1, mma_gemm::BK);
}

template <Epilogue E, bool kBf16, int kWn = 2>
__global__ void __launch_bounds__(64 * kWn)
    linear_mma_kernel(const LinearB16Params p, const KOrder o, const SplitK split) {
  using namespace mma_gemm;
  constexpr int kBN = 32 * kWn, kT = 64 * kWn;  // the block's columns and threads
  SERVEKIT_SHARED(SharedStorage<kBN>, s);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / kWn, wn = warp % kWn;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * kBN;
  const bool splits = split.partial != nullptr;  // this block sums part blockIdx.z only
  const int k_begin = splits ? blockIdx.z * o.part_len : 0;
  const int k_end = splits ? imin(p.K, k_begin + o.part_len) : p.K;
  float acc[4][4] = {};    // (n8 tile, fragment element): the current part's sum
  float total[4][4] = {};  // the finished parts'
  // W's rows start 16-byte aligned (N % 8 == 0, an aligned base): its tiles come by cp.async,
  // a whole chunk in range or none (zeros). Otherwise word by word, as stores.
  const bool chunks = p.N % kChunk == 0 && reinterpret_cast<std::uintptr_t>(p.w) % 16 == 0;
  // Stage slice k0 into buffer st. Out-of-range elements are staged as zeros: they add nothing.
  auto stage = [&](int st, int k0) {
    for (int i = threadIdx.x; i < BM * BK; i += kT) {
      const int rr = i / BK, k = i % BK;
      const int gm = m0 + rr, gk = k0 + k;
      s.a[st][rr][k] =
          to_b16<kBf16>(gm < p.M && gk < p.K ? p.x[static_cast<int64_t>(gm) * p.K + gk] : 0.f);
    }
    if (chunks) {
      for (int i = threadIdx.x; i < BK * kBN / kChunk; i += kT) {
        const int k = i / (kBN / kChunk), c = i % (kBN / kChunk) * kChunk;
        const int gk = k0 + k, gn = n0 + c;
        const bool in = gk < p.K && gn < p.N;
        simt::cp_async_16(&s.b[st][k][c], in ? p.w + static_cast<int64_t>(gk) * p.N + gn : p.w,
                          in ? 16 : 0);
      }
    } else {
      for (int i = threadIdx.x; i < BK * kBN; i += kT) {
        const int k = i / kBN, c = i % kBN;
        const int gk = k0 + k, gn = n0 + c;
        s.b[st][k][c] =
            gk < p.K && gn < p.N ? p.w[static_cast<int64_t>(gk) * p.N + gn] : std::uint16_t{0};
      }
    }
  };
  // ldmatrix row addresses: lane l feeds row l % 8 of matrix l / 8.
  const int j = lane / 8, r = lane % 8;
  const int steps = ceil_div(k_end - k_begin, BK);
  // Every iteration commits one group (empty past the last slice), so that the wait below
  // always means "slice i has landed".
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < steps) stage(i, k_begin + i * BK);
    simt::cp_async_commit();
  }
  for (int i = 0; i < steps; ++i) {
    const int k0 = k_begin + i * BK, st = i % kStages;
    simt::cp_async_wait<kStages - 2>();
    // Slice i is in every thread's view, and every thread is done with slice i - 1, whose
    // buffer the next stage overwrites.
    __syncthreads();
    if (i + kStages - 1 < steps) stage((i + kStages - 1) % kStages, k0 + (kStages - 1) * BK);
    simt::cp_async_commit();
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      // A (16 x 16): matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15), in a0..a3 order.
      std::uint32_t af[4];
      simt::ldmatrix_x4(af, &s.a[st][wm * 16 + (j & 1) * 8 + r][kk + (j >> 1) * 8]);
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        // B for two n8 tiles: matrices (k 0-7 | 8-15) x (n 0-7 | 8-15), transposed on load.
        std::uint32_t bf[4];
        simt::ldmatrix_x4_trans(bf,
                                &s.b[st][kk + (j & 1) * 8 + r][wn * 32 + t * 16 + (j >> 1) * 8]);
        mma16816<kBf16>(acc[2 * t], af, bf);
        mma16816<kBf16>(acc[2 * t + 1], af, bf + 2);
      }
    }
    if (!splits && o.part_ends(k0, BK, p.K)) {
#pragma unroll
      for (int t = 0; t < 4; ++t)
#pragma unroll
        for (int q = 0; q < 4; ++q) total[t][q] += acc[t][q], acc[t][q] = 0.f;
    }
  }
  namespace L = simt::mma_layout;
#pragma unroll
  for (int t = 0; t < 4; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int m = m0 + wm * 16 + L::c_row(lane, i);
      const int n = n0 + wn * 32 + t * 8 + L::c_col(lane, i);
      if (m >= p.M || n >= p.N) continue;
      if (splits)
        split.partial[(static_cast<int64_t>(blockIdx.z) * p.M + m) * p.N + n] = acc[t][i];
      else
        store_epilogue<E>(p.out + static_cast<int64_t>(m) * p.N + n,
                          with_addend(total[t][i] + (p.b ? p.b[n] : 0.f), p.add, m, n, p.N));
    }
  if (splits)
    split_k_finish<E>(split, o.parts, blockIdx.y * gridDim.x + blockIdx.x, m0, BM, n0, kBN, p.M,
                      p.N, p.b, p.add, p.out);
}

// The split-K scratch of tensor-core launches of up to M rows over a (K, N) weight.
inline SplitSize mma_split_size(int M, int K, int N) {
  return split_size(mma_order(K, N), mma_gemm::BM, mma_gemm::BN, mma_gemm::kSplitRows, M, N);
}

template <Epilogue E, bool kBf16>
void linear_mma(const LinearB16Params& p, simt::stream_handle stream = nullptr,
                const SplitK& split = {}) {
  const char* who = kBf16 ? "kernels::linear_mma (bf16)" : "kernels::linear_mma (f16)";
  if (p.M < 1 || p.K < 1 || p.N < 1)
    fail(who, ": cannot run the shape M = ", p.M, ", K = ", p.K, ", N = ", p.N);
  if (ceil_div(p.M, mma_gemm::BM) > 65535)
    fail(who, ": M = ", p.M, " needs more than 65535 row tiles");
  using namespace mma_gemm;
  const KOrder o = mma_order(p.K, p.N);
  const int tiles = ceil_div(p.N, BN), row_tiles = ceil_div(p.M, BM);
  // A counter per (row tile, column tile): at most that many blocks' tiles, whatever the width.
  const bool splits = splits_k(split, o, p.M, kSplitRows, p.N, row_tiles * tiles);
  const int wide = tiles_per_block(p.M, tiles, row_tiles * (splits ? o.parts : 1), kMaxWide);
  simt::expect_bytes(linear_bytes(E, p.M, p.K, p.N,
                                  static_cast<std::size_t>(p.K) * p.N * sizeof(std::uint16_t), BM,
                                  BN * wide, p.b, p.add) +
                     split_k_bytes(splits, o.parts, p.M, p.N));
  const dim3 grid(ceil_div(tiles, wide), row_tiles, splits ? o.parts : 1);
  const SplitK s = splits ? split : SplitK{};
  if (wide == 2)
    simt::launch(simt::kernel<linear_mma_kernel<E, kBf16, 4>>, grid, dim3(2 * kThreads), 0, stream,
                 p, o, s);
  else
    simt::launch(simt::kernel<linear_mma_kernel<E, kBf16>>, grid, dim3(kThreads), 0, stream, p, o,
                 s);
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
