// SPDX-License-Identifier: Apache-2.0
#pragma once
// Symmetric int8 quantisation, the one formula every 8-bit path shares (the int8 KV cache's
// rows, W8A8's weights and its activations): a group of values x with s = max |x| / 127 is
// stored as codes round(x / s) (to nearest even, as std::nearbyint does in the default
// rounding mode) in -127..127, and read back as code * s. An all-zero group has s = 0 and
// codes 0. -128 is never written, so a code's negation is a code (the AVX2 W8A8 path and the
// device's signed dot products rely on |code| <= 127).
// The scale, the absmax step and the code are SERVEKIT_HD: the device's int8 cache
// (kernels/kv_append.hpp) and W8A8 activations (kernels/linear_i8_common.hpp) call these.
#include <cmath>
#include <cstdint>

#include "servekit/core/hd.hpp"

namespace servekit {

SERVEKIT_HD inline float s8_scale(float absmax) {
  return absmax / 127.f;
}

// One step of max |x| over a group: a NaN wins over every number, and stays.
SERVEKIT_HD inline float s8_absmax_step(float m, float a) {
  return a > m || a != a ? a : m;
}

// max |x| of a group, NaN if any value is NaN: a group holding a NaN (or an infinity) gets a
// scale that is not finite, so what is computed from it is not finite either, instead of
// finite numbers made from the group's other values.
inline float s8_absmax(const float* x, int n, int64_t stride = 1) {
  float m = 0.f;
  for (int i = 0; i < n; i++) {
    m = s8_absmax_step(m, std::fabs(x[i * stride]));
    if (m != m) break;
  }
  return m;
}

// A value's code under scale s; 0 where x / s is not a number (a NaN, or infinity / infinity:
// the scale says so already), so that no NaN is ever converted to an integer.
SERVEKIT_HD inline int8_t s8_code(float x, float s) {
  if (!(s > 0.f)) return 0;
  const float r = std::nearbyint(x / s);
  return r == r ? static_cast<int8_t>(r) : int8_t{0};
}

// n values at x[0], x[stride], ... into q[0], q[stride], ...; returns their scale.
inline float quantize_s8(int8_t* q, const float* x, int n, int64_t stride = 1) {
  const float s = s8_scale(s8_absmax(x, n, stride));
  for (int i = 0; i < n; i++) q[i * stride] = s8_code(x[i * stride], s);
  return s;
}

}  // namespace servekit
