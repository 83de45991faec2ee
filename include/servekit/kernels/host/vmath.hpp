// SPDX-License-Identifier: Apache-2.0
#pragma once
// exp and the GELU on whole vectors. libm's expf / tanhf are called one float at a time (the
// GELU was 13% of a batch-32 decode step, the softmax's exp most of the attention's arithmetic);
// these run kLanes at once with a handful of FMAs.
//
// Each output is a function of its input alone: the same float whichever lane or call computes
// it, so the kernels' batch invariance holds. Rows whose length is not a multiple of kLanes end
// through the same vector function on a padded copy, never through libm.
#include <cstdint>

#include "servekit/kernels/host/simd.hpp"

namespace servekit::kernels::host {

using ivec = std::int32_t __attribute__((vector_size(kLanes * sizeof(std::int32_t))));

// e^x, within ~1 ulp over the normal range. x = n ln2 + r with |r| <= ln2 / 2, ln2 split in two
// so that n ln2 is exact; e^r from a degree-7 polynomial (1 + r + r^2 P(r), Cephes' expf
// coefficients); 2^n built in the exponent field. x is clamped to [ln 2^-126, ln 2^127.5), so
// 2^n stays a normal float: the result is >= 2^-126 where e^x would be a denormal or zero,
// which nothing here can tell from zero. NaN stays NaN.
inline vec exp(vec x) {
  const vec lo = vec{} - 87.33654022f, hi = vec{} + 88.37626266f;  // ln 2^-126 rounded up
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  // round(x / ln2) by the 1.5 * 2^23 trick: exact round-to-nearest for |v| < 2^22.
  const vec magic = vec{} + 12582912.f;
  const vec n = (madd(x, vec{} + 1.44269504f, magic)) - magic;
  vec r = madd(n, vec{} - 0.693359375f, x);
  r = madd(n, vec{} + 2.12194440e-4f, r);
  vec p = vec{} + 1.9875691500e-4f;
  p = madd(p, r, vec{} + 1.3981999507e-3f);
  p = madd(p, r, vec{} + 8.3334519073e-3f);
  p = madd(p, r, vec{} + 4.1665795894e-2f);
  p = madd(p, r, vec{} + 1.6666665459e-1f);
  p = madd(p, r, vec{} + 5.0000001201e-1f);
  const vec e = madd(p, r * r, r + 1.f);
  const ivec bits = (__builtin_convertvector(n, ivec) + 127) << 23;
  vec two_n;
  static_assert(sizeof two_n == sizeof bits);
  __builtin_memcpy(&two_n, &bits, sizeof bits);
  return e * two_n;
}

// GELU, tanh form (HF "gelu_new"): 0.5 x (1 + tanh(y)) = x / (1 + e^(-2y)),
// y = sqrt(2/pi) (x + 0.044715 x^3). The sigmoid form has no cancellation for negative x.
inline vec gelu_tanh(vec x) {
  const vec y = (vec{} + 0.7978845608028654f) * madd(vec{} + 0.044715f, x * x * x, x);
  return x / (1.f + exp(-2.f * y));
}

// The same function on one float: a padded vector, so a row's tail rounds as its body does.
inline float gelu_tanh(float x) {
  vec v{};
  v[0] = x;
  return gelu_tanh(v)[0];
}

// out[i] = gelu(in[i]) for i < n (in and out may be the same row).
inline void gelu_row(float* out, const float* in, int n) {
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) store(out + i, gelu_tanh(load(in + i)));
  if (i < n) {
    vec v{};
    for (int j = 0; i + j < n; j++) v[j] = in[i + j];
    v = gelu_tanh(v);
    for (int j = 0; i + j < n; j++) out[i + j] = v[j];
  }
}

}  // namespace servekit::kernels::host
