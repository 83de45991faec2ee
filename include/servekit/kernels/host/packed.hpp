// SPDX-License-Identifier: Apache-2.0
#pragma once
// A weight matrix in the order the host micro-kernel reads it, made once when the model is
// built (the host backend's Ops::resident). The matmul's register tile walks a strip of kNR
// columns down all K rows; in W's own (K, N) order that strip is one or two cache lines per
// row, rows N elements apart, which the hardware prefetchers do not follow. Packed, each strip
// is its K x kNR elements back to back, read as one stream:
//   strip s, row k, lane j  =  W[k][s * kNR + j]      at  (s * K + k) * kNR + j
// with the last strip padded with zero elements (their sums are computed and never stored).
// The format's other arrays (zero-point scale and min) are untouched.
//
// On the Zen 5 machine of docs/PERFORMANCE.md, an (8 x 768) @ (768 x 3072) f16 linear read W
// at 16 GB/s in the (K, N) order and at 32 GB/s packed (bench_host_linear).
#include <cstdint>
#include <utility>
#include <vector>

#include "servekit/kernels/host/i8_isa.hpp"
#include "servekit/kernels/host/simd.hpp"
#include "servekit/weights/traits.hpp"

namespace servekit::kernels::host {

// w (K, N) -> its strips, padded to a whole number of kNR columns.
template <class T>
std::vector<T> pack_strips(const std::vector<T>& w, int K, int N) {
  const int strips = (N + kNR - 1) / kNR;
  std::vector<T> p(static_cast<std::size_t>(strips) * K * kNR, T{});
  for (int s = 0; s < strips; s++)
    for (int k = 0; k < K; k++)
      for (int j = 0; j < kNR && s * kNR + j < N; j++)
        p[(static_cast<std::size_t>(s) * K + k) * kNR + j] =
            w[static_cast<std::size_t>(k) * N + s * kNR + j];
  return p;
}

// int8 codes (W8A8) go in strips of kQNR columns made of quads, each quad kQNR columns x 4
// consecutive k (the operand of an integer dot-product instruction, host/linear_i8.hpp):
//   strip s, quad kq, column j, byte i  =  W[4 kq + i][s * kQNR + j]   at  ((s K/4 + kq) kQNR + j)
//   4 + i
// K is a multiple of 4 (weights::W8A8 checks it at load); padding columns are zero.
constexpr int kQNR = 16;
inline std::vector<int8_t> pack_quads(const std::vector<int8_t>& w, int K, int N) {
  const int strips = (N + kQNR - 1) / kQNR, KQ = K / 4;
  std::vector<int8_t> p(static_cast<std::size_t>(strips) * KQ * kQNR * 4, 0);
  for (int s = 0; s < strips; s++)
    for (int kq = 0; kq < KQ; kq++)
      for (int j = 0; j < kQNR && s * kQNR + j < N; j++)
        for (int i = 0; i < 4; i++)
          p[((static_cast<std::size_t>(s) * KQ + kq) * kQNR + j) * 4 + i] =
              w[static_cast<std::size_t>(4 * kq + i) * N + s * kQNR + j];
  return p;
}

// Each group's column sums of int8 codes (K / group_rows, N), which a kernel feeding the
// activations as unsigned bytes (x + 128, VNNI's vpdpbusd) subtracts back:
//   sum_k (xq_k + 128) wq_k = isum + 128 colsum.
// Only those builds keep them (kActBias, host/i8_isa.hpp): AVX2's signed codes need none.
inline std::vector<int32_t> quad_colsums(const std::vector<int8_t>& w, int K, int N, int GK) {
  std::vector<int32_t> sums(static_cast<std::size_t>(K / GK) * N, 0);
  for (int k = 0; k < K; k++)
    for (int n = 0; n < N; n++)
      sums[static_cast<std::size_t>(k / GK) * N + n] += w[static_cast<std::size_t>(k) * N + n];
  return sums;
}

// The format's Matrix (weights/) with its element array in strip order (int8: and the column
// sums its kernel needs). It keeps what reports read (rows, cols, bytes(), state_bytes()) and
// nothing that indexes W as (K, N): a dequant(k, n) here would read the wrong element.
template <class Mat>
class Packed {
 public:
  using Format = weights::format_of<Mat>;
  int rows = 0;  // K
  int cols = 0;  // N

  static Packed pack(Mat&& m) {
    Packed p;
    p.rows = m.rows, p.cols = m.cols;
    auto& e = weights::Traits<weights::format_of<Mat>>::codes(m);
    if constexpr (weights::family_of<Mat> == weights::LinearFamily::Int8) {
      if constexpr (kActBias != 0) p.colsum_ = quad_colsums(e, m.rows, m.cols, m.group_rows);
      e = pack_quads(e, m.rows, m.cols);
    } else
      e = pack_strips(e, m.rows, m.cols);
    p.m_ = std::move(m);
    return p;
  }
  // The stored bytes, padding included.
  std::size_t bytes() const { return m_.bytes() + colsum_bytes(); }
  std::size_t state_bytes() const { return m_.state_bytes() + colsum_bytes(); }
  // The format's arrays, the elements in strip order.
  const Mat& strips() const { return m_; }
  // int8 formats on builds whose codes carry kActBias: quad_colsums of the codes
  // (K / group_rows, N); empty otherwise.
  const std::vector<int32_t>& colsum() const { return colsum_; }

 private:
  std::size_t colsum_bytes() const { return colsum_.size() * sizeof(int32_t); }
  Mat m_;
  std::vector<int32_t> colsum_;
};

}  // namespace servekit::kernels::host
