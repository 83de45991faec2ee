// SPDX-License-Identifier: Apache-2.0
// fp16 / bf16 conversions, checked exhaustively over every 16-bit pattern against a formula
// computed in double (and, where the compiler has it, against _Float16), and float -> 16-bit
// rounding checked at every rounding boundary plus a sweep over the float bit patterns.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include <catch2/catch.hpp>

#include "servekit/core/dtype.hpp"

using namespace servekit;

namespace {

// The value a half pattern denotes, straight from IEEE 754's definition.
double ref_half_value(uint16_t b) {
  const int s = b >> 15, e = (b >> 10) & 0x1f, m = b & 0x3ff;
  const double sign = s ? -1.0 : 1.0;
  if (e == 0x1f) return m ? std::numeric_limits<double>::quiet_NaN() : sign * HUGE_VAL;
  if (e == 0) return sign * std::ldexp(double(m), -24);
  return sign * std::ldexp(1.0 + m / 1024.0, e - 15);
}

double ref_bf16_value(uint16_t b) {
  const int s = b >> 15, e = (b >> 7) & 0xff, m = b & 0x7f;
  const double sign = s ? -1.0 : 1.0;
  if (e == 0xff) return m ? std::numeric_limits<double>::quiet_NaN() : sign * HUGE_VAL;
  if (e == 0) return sign * std::ldexp(double(m), -133);
  return sign * std::ldexp(1.0 + m / 128.0, e - 127);
}

// Round-to-nearest-even to a binary format with `mant_bits` stored mantissa bits and minimum
// normal exponent `emin`, done in double: x / ulp is exact (power-of-two scaling), and
// nearbyint rounds ties to even in the default rounding mode. With e = max(floor(log2|x|),
// emin), the pattern is ((e - emin) << mant_bits) + round(|x| / 2^(e - mant_bits)), which also
// covers denormals and the carry into the next binade.
uint16_t ref_round(double x, int mant_bits, int emin, uint16_t inf_bits) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (a == 0) return sign;
  int e = std::ilogb(a);
  if (e < emin) e = emin;
  const double r = std::nearbyint(std::ldexp(a, mant_bits - e));
  const double bits = std::ldexp(double(e - emin), mant_bits) + r;
  if (bits >= inf_bits) return uint16_t(sign | inf_bits);
  return uint16_t(sign | uint16_t(bits));
}
uint16_t ref_float_to_half(float x) {
  return ref_round(x, 10, -14, 0x7c00);
}
uint16_t ref_float_to_bf16(float x) {
  return ref_round(x, 7, -126, 0x7f80);
}

float next_up(float x) {
  return std::nextafter(x, HUGE_VALF);
}
float next_down(float x) {
  return std::nextafter(x, -HUGE_VALF);
}

}  // namespace

TEST_CASE("half_to_float is exact for all 65536 patterns", "[dtype]") {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = half_to_float(half_t{uint16_t(b)});
    const double ref = ref_half_value(uint16_t(b));
    INFO("half bits 0x" << std::hex << b);
    if (std::isnan(ref)) {
      REQUIRE(std::isnan(f));
      REQUIRE(std::signbit(f) == bool(b & 0x8000));
    } else {
      REQUIRE(double(f) == ref);
      REQUIRE(std::signbit(f) == bool(b & 0x8000));  // -0 stays -0
    }
#ifdef __FLT16_MAX__
    const float g = float(std::bit_cast<_Float16>(uint16_t(b)));
    if (!std::isnan(g)) REQUIRE(std::bit_cast<uint32_t>(f) == std::bit_cast<uint32_t>(g));
#endif
  }
}

TEST_CASE("float_to_half round-trips every half and rounds ties to even", "[dtype]") {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = uint16_t(b);
    const float f = half_to_float(half_t{h});
    INFO("half bits 0x" << std::hex << b);
    if (std::isnan(f)) {
      const half_t back = float_to_half(f);
      REQUIRE(std::isnan(half_to_float(back)));
      REQUIRE((back.bits & 0x8000) == (h & 0x8000));
      continue;
    }
    REQUIRE(float_to_half(f).bits == h);
    if (std::isinf(f) || (h & 0x7fff) == 0x7bff) continue;  // no finite half above
    // The midpoint to the next pattern away from zero is exact in float (half has 11 bits of
    // precision, float 24), so the tie and the floats either side of it are all testable.
    const float up = half_to_float(half_t{uint16_t(h + 1)});
    const float mid = float((double(f) + double(up)) / 2);
    REQUIRE(double(mid) == (double(f) + double(up)) / 2);
    for (float x : {mid, next_up(mid), next_down(mid), next_up(f), next_down(up)}) {
      INFO("x = " << x);
      REQUIRE(float_to_half(x).bits == ref_float_to_half(x));
#ifdef __FLT16_MAX__
      REQUIRE(float_to_half(x).bits == std::bit_cast<uint16_t>(_Float16(x)));
#endif
    }
  }
}

TEST_CASE("float_to_half over a sweep of float bit patterns", "[dtype]") {
  // A prime stride visits every exponent and a spread of mantissas, including float denormals.
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4099) {
    const float x = std::bit_cast<float>(uint32_t(u));
    INFO("float bits 0x" << std::hex << u);
    const half_t h = float_to_half(x);
    if (std::isnan(x)) {
      REQUIRE(std::isnan(half_to_float(h)));
      continue;
    }
    REQUIRE(h.bits == ref_float_to_half(x));
#ifdef __FLT16_MAX__
    REQUIRE(h.bits == std::bit_cast<uint16_t>(_Float16(x)));
#endif
  }
}

TEST_CASE("float_to_half edge values", "[dtype]") {
  // Overflow threshold, the tie into inf, denormal ties, float denormals, the carry from the
  // largest denormal into the smallest normal.
  for (float x : {65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e10f, -1e10f, std::ldexp(1.0f, -24),
                  std::ldexp(1.0f, -25), next_up(std::ldexp(1.0f, -25)), -std::ldexp(1.0f, -26),
                  std::numeric_limits<float>::denorm_min(), std::ldexp(1023.5f, -24),
                  std::ldexp(1022.5f, -24), std::numeric_limits<float>::max()}) {
    INFO("x = " << x);
    REQUIRE(float_to_half(x).bits == ref_float_to_half(x));
#ifdef __FLT16_MAX__
    REQUIRE(float_to_half(x).bits == std::bit_cast<uint16_t>(_Float16(x)));
#endif
  }
  CHECK(std::isinf(half_to_float(float_to_half(65520.0f))));
  CHECK(half_to_float(float_to_half(65519.99f)) == 65504.0f);  // the largest half
  CHECK(std::signbit(half_to_float(float_to_half(-std::ldexp(1.0f, -26)))));
}

TEST_CASE("bf16_to_float is exact for all 65536 patterns", "[dtype]") {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_float(bf16_t{uint16_t(b)});
    const double ref = ref_bf16_value(uint16_t(b));
    INFO("bf16 bits 0x" << std::hex << b);
    if (std::isnan(ref)) {
      REQUIRE(std::isnan(f));
    } else {
      REQUIRE(double(f) == ref);
      REQUIRE(std::signbit(f) == bool(b & 0x8000));
    }
  }
}

TEST_CASE("float_to_bf16 round-trips and rounds ties to even at every boundary", "[dtype]") {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = uint16_t(b);
    const float f = bf16_to_float(bf16_t{h});
    INFO("bf16 bits 0x" << std::hex << b);
    if (std::isnan(f)) {
      REQUIRE(std::isnan(bf16_to_float(float_to_bf16(f))));
      continue;
    }
    REQUIRE(float_to_bf16(f).bits == h);
    if (std::isinf(f)) continue;
    // The float halfway to the next pattern (also the overflow tie at the top, which rounds to
    // inf because the mantissa 0x7f is odd).
    const float mid = std::bit_cast<float>((uint32_t(h) << 16) | 0x8000u);
    for (float x : {mid, next_up(mid), next_down(mid)}) {
      INFO("x = " << x);
      REQUIRE(float_to_bf16(x).bits == ref_float_to_bf16(x));
    }
  }
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4099) {
    const float x = std::bit_cast<float>(uint32_t(u));
    if (std::isnan(x)) {
      REQUIRE(std::isnan(bf16_to_float(float_to_bf16(x))));
      continue;
    }
    INFO("float bits 0x" << std::hex << u);
    REQUIRE(float_to_bf16(x).bits == ref_float_to_bf16(x));
  }
}

TEST_CASE("signalling NaN payloads stay NaN", "[dtype]") {
  // Truncation alone would turn these into infinities.
  const float snan = std::bit_cast<float>(0x7f800001u);
  CHECK(std::isnan(half_to_float(float_to_half(snan))));
  CHECK(std::isnan(bf16_to_float(float_to_bf16(snan))));
  CHECK(std::isnan(half_to_float(float_to_half(-snan))));
}

TEST_CASE("DType names, sizes and parsing", "[dtype]") {
  for (DType t : all_dtypes) {
    INFO(name(t));
    REQUIRE(dtype_from_name(name(t)) == t);
    REQUIRE(size(t) > 0);
  }
  CHECK(size(DType::F32) == 4);
  CHECK(size(DType::BF16) == 2);
  CHECK(size(DType::F64) == 8);
  CHECK(size(DType::BOOL) == 1);
  CHECK(!dtype_from_name("F31").has_value());
  CHECK(!dtype_from_name("f32").has_value());  // safetensors spells them in capitals
  CHECK(is_float_storage(DType::BF16));
  CHECK(!is_float_storage(DType::F64));
  // usable in constant expressions
  static_assert(float_to_half(1.0f).bits == 0x3c00);
  static_assert(half_to_float(half_t{0xc000}) == -2.0f);
  static_assert(float_to_bf16(1.0f).bits == 0x3f80);
}
