// SPDX-License-Identifier: Apache-2.0
#pragma once
// weights::Traits<Fmt>: what the rest of the library needs to know about a weight format,
// specialised in the format's own header next to its Matrix (weights/f32.hpp is the smallest):
//   Element                 the type of the (K, N) codes the linear kernels stream
//   family                  which kernels compute its linears (LinearFamily below)
//   codes(m)                the (K, N) array of a Matrix: what the host packs in strips, and
//                           what a dense format's device copy uploads
// The host kernels read a Matrix through the view of its family (kernels/host/linear.hpp); the
// device kernels pick a launcher by family (backend/simt_ops.hpp); a dense family's device copy
// is DeviceMatrix's primary template (weights/device_matrix.hpp). A new format of an existing
// family touches only its own header; a new family also the kernels' loader for it.
#include <cstddef>

#include "servekit/weights/matrix.hpp"
#include "servekit/weights/policy.hpp"

namespace servekit::weights {

enum class LinearFamily {
  Dense32,     // fp32 codes: the host matmul; CUDA-core GEMV and tiled GEMM on a device
  Dense16,     // 16-bit floats widened as they stream: tensor cores (mma.sync) on a device
  ZeroPoint8,  // uint8 codes, (scale, min) per group, the dequantisation fused
  Int8,        // int8 codes times int8 activations, int32 sums, a scale per group and row (W8A8)
};

template <class Fmt>
struct Traits {
  static_assert(sizeof(Fmt) == 0,
                "servekit: no weights::Traits<Fmt> for this format: specialise it in the format's "
                "header (Element, family, codes), as weights/f32.hpp does");
};

// The format of a Matrix<Fmt>, or of anything holding one that names it `Format` (a device
// copy, a packed matrix).
template <class M>
struct MatrixFormat {
  using type = typename M::Format;
};
template <WeightFormat F>
struct MatrixFormat<Matrix<F>> {
  using type = F;
};
template <class M>
using format_of = typename MatrixFormat<M>::type;

template <class M>
inline constexpr LinearFamily family_of = Traits<format_of<M>>::family;

}  // namespace servekit::weights
