// SPDX-License-Identifier: Apache-2.0
#pragma once
// Every weight format, for code that is generic over them (tests, reports, benchmarks).
#include <tuple>

#include "servekit/weights/bf16.hpp"
#include "servekit/weights/f16.hpp"
#include "servekit/weights/f32.hpp"
#include "servekit/weights/u8_zero_point.hpp"
#include "servekit/weights/w8a8.hpp"

namespace servekit::weights {

// The formats the examples and benchmarks compare, fp32 first.
using AllFormats = std::tuple<F32, F16, BF16, U8ZeroPoint<PerTensor>, U8ZeroPoint<PerChannel>,
                              U8ZeroPoint<Group<64>>, W8A8<PerChannel>>;

}  // namespace servekit::weights
