// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// The per-row parameters of the device sampler (kernels/sampling.hpp). The type lives in core/,
// below the kernels, the model and the engine, which all name it; here it gets the kernels' name.
#include "servekit/core/row_sampling.hpp"

namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

using servekit::check_row;
using servekit::RowSampling;

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
