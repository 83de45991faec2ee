// SPDX-License-Identifier: Apache-2.0
#pragma once
// Element types: IEEE half and bfloat16 as plain 16-bit storage types with host conversions, and
// the DType tag that names a tensor's element type in a checkpoint.
//
// half_t/bf16_t are deliberately not CUDA's __half/__nv_bfloat16: the host backend builds
// without CUDA headers, and the bit layout is identical, so device code can reinterpret them.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string_view>

namespace servekit {

struct half_t {
  uint16_t bits;
};
struct bf16_t {
  uint16_t bits;
};
static_assert(sizeof(half_t) == 2 && sizeof(bf16_t) == 2);

// ---------------------------------------------------------------------------------------------
// fp16 <-> fp32

// Exact: every half is representable as a float.
constexpr float half_to_float(half_t h) {
  const uint32_t sign = uint32_t(h.bits & 0x8000u) << 16;
  const uint32_t exp = (h.bits >> 10) & 0x1fu;
  uint32_t mant = h.bits & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf, nan
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return std::bit_cast<float>(sign);  // +-0
  // Denormal half (mant * 2^-24) is a normal float: shift the leading 1 into the implicit bit.
  uint32_t e = 113;  // float exponent of 2^-14, the half denormal scale
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return std::bit_cast<float>(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

// Round to nearest, ties to even; overflow goes to inf, tiny values to (signed) zero or a
// denormal; NaN stays NaN (quieted, top payload bits kept).
constexpr half_t float_to_half(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {
    if (ax == 0x7f800000u) return {uint16_t(sign | 0x7c00u)};
    return {uint16_t(sign | 0x7e00u | ((ax >> 13) & 0x3ffu))};
  }
  const uint32_t fexp = ax >> 23;
  if (fexp >= 113) {  // normal half range (or overflow)
    const uint32_t mant = ax & 0x7fffffu;
    uint32_t h = ((fexp - 112) << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry may reach the exponent
    if (h >= 0x7c00u) h = 0x7c00u;                           // >= 65520 rounds to inf
    return {uint16_t(sign | h)};
  }
  // Half denormal: value = m * 2^(fexp - 150) = k * 2^-24  =>  k = m >> (126 - fexp).
  const uint32_t shift = 126 - fexp;
  if (shift > 24) return {sign};  // below half the smallest denormal (float denormals included)
  const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  uint32_t k = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (k & 1u))) ++k;  // k == 0x400 is the smallest normal
  return {uint16_t(sign | k)};
}

// ---------------------------------------------------------------------------------------------
// bf16 <-> fp32: bf16 is the top half of a float.

constexpr float bf16_to_float(bf16_t b) {
  return std::bit_cast<float>(uint32_t(b.bits) << 16);
}

constexpr bf16_t float_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return {uint16_t((x >> 16) | 0x40u)};  // quiet NaN
  // Adding 0x7fff plus the lowest kept bit rounds to nearest even; overflow carries into inf.
  return {uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16)};
}

// ---------------------------------------------------------------------------------------------
// DType: the element types a safetensors checkpoint may hold. F8 types are recognised so that
// an error can say "unsupported" rather than "unknown".

enum class DType : uint8_t {
  F64,
  F32,
  F16,
  BF16,
  I64,
  I32,
  I16,
  I8,
  U64,
  U32,
  U16,
  U8,
  BOOL,
  F8_E4M3,
  F8_E5M2,
};

// The safetensors spelling ("F32", "BF16", ...).
constexpr std::string_view name(DType t) {
  switch (t) {
    case DType::F64:
      return "F64";
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
    case DType::I64:
      return "I64";
    case DType::I32:
      return "I32";
    case DType::I16:
      return "I16";
    case DType::I8:
      return "I8";
    case DType::U64:
      return "U64";
    case DType::U32:
      return "U32";
    case DType::U16:
      return "U16";
    case DType::U8:
      return "U8";
    case DType::BOOL:
      return "BOOL";
    case DType::F8_E4M3:
      return "F8_E4M3";
    case DType::F8_E5M2:
      return "F8_E5M2";
  }
  return "?";
}

// Bytes per element.
constexpr std::size_t size(DType t) {
  switch (t) {
    case DType::F64:
    case DType::I64:
    case DType::U64:
      return 8;
    case DType::F32:
    case DType::I32:
    case DType::U32:
      return 4;
    case DType::F16:
    case DType::BF16:
    case DType::I16:
    case DType::U16:
      return 2;
    case DType::I8:
    case DType::U8:
    case DType::BOOL:
    case DType::F8_E4M3:
    case DType::F8_E5M2:
      return 1;
  }
  return 0;
}

inline constexpr DType all_dtypes[] = {DType::F64,  DType::F32,     DType::F16,    DType::BF16,
                                       DType::I64,  DType::I32,     DType::I16,    DType::I8,
                                       DType::U64,  DType::U32,     DType::U16,    DType::U8,
                                       DType::BOOL, DType::F8_E4M3, DType::F8_E5M2};

// Parses the safetensors spelling; nullopt for anything else.
constexpr std::optional<DType> dtype_from_name(std::string_view s) {
  for (DType t : all_dtypes)
    if (name(t) == s) return t;
  return std::nullopt;
}

// Types servekit can read as floats.
constexpr bool is_float_storage(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

inline std::ostream& operator<<(std::ostream& os, DType t) {
  return os << name(t);
}

}  // namespace servekit
