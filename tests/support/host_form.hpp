// SPDX-License-Identifier: Apache-2.0
#pragma once
// A weight matrix in the form the host kernels read it: the integer formats packed (as the host
// backend holds them, kernels/host/packed.hpp), every other format as it is.
#include "servekit/kernels/host/packed.hpp"
#include "servekit/weights/traits.hpp"

namespace servekit::test {

template <class Mat>
decltype(auto) host_form(const Mat& W) {
  if constexpr (weights::family_of<Mat> == weights::LinearFamily::Int8)
    return kernels::host::Packed<Mat>::pack(Mat(W));
  else
    return (W);
}

}  // namespace servekit::test
