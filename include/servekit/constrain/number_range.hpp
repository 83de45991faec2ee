// SPDX-License-Identifier: Apache-2.0
#pragma once
// Ranges of numbers (JSON schema's minimum, maximum, exclusive bounds and multipleOf) while
// the matcher writes a number digit by digit: whether the digits so far can still end in
// range, and in how few more bytes. The arithmetic is exact: integers as they are, numbers in
// units of 1e-18 (a decimal with at most 18 fraction digits is a whole number of units), so
// that 0.1 is 0.1 and not the double nearest it.
//
// A bounded number is written without an exponent and with at most 15 digits, so that the
// digits so far, as one integer, fit the frame's 64 bits, and a reader that parses numbers as
// doubles (Python, JavaScript) gets them back exactly (DBL_DIG is 15): it sees the value in
// range too, not a neighbour rounded onto an exclusive bound.
#include <algorithm>
#include <cstdint>
#include <string_view>

#include "servekit/constrain/grammar_graph.hpp"
#include "servekit/constrain/match_state.hpp"

namespace servekit::constrain::range {

using i128 = __int128;
inline constexpr int kIntDigits = 15, kDigits = 15;
inline constexpr i128 kUnit = 1'000'000'000'000'000'000;  // units in 1

inline i128 pow10(int k) {
  i128 p = 1;
  while (k-- > 0) p *= 10;
  return p;
}
inline i128 floor_div(i128 a, i128 b) {  // b > 0
  const i128 q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}
inline i128 ceil_div(i128 a, i128 b) {
  return -floor_div(-a, b);
}
inline i128 gcd(i128 a, i128 b) {
  while (b != 0) a = std::exchange(b, a % b);
  return a;
}
// (a * b) mod m for 0 <= a, b < m < 2^126: doubling, as the product may not fit.
inline i128 mul_mod(i128 a, i128 b, i128 m) {
  i128 r = 0;
  for (; b > 0; b >>= 1) {
    if (b & 1) r = (r + a) % m;
    a = (a + a) % m;
  }
  return r;
}
// a's inverse modulo m (gcd(a, m) = 1), by extended Euclid.
inline i128 inverse(i128 a, i128 m) {
  i128 r0 = a % m, r1 = m, s0 = 1, s1 = 0;
  while (r1 != 0) {
    const i128 q = r0 / r1;
    r0 = std::exchange(r1, r0 - q * r1);
    s0 = std::exchange(s1, s0 - q * s1);
  }
  s0 %= m;
  return s0 < 0 ? s0 + m : s0;
}

// Is there an x = from + k*g (k >= 0, x <= to) with lo <= x <= hi and, where step > 0, a
// multiple of step? The grid x = from (mod g) and the multiples meet on a progression (the
// Chinese remainder theorem), whose first point at or above lo is computed, not searched.
inline bool hit(i128 from, i128 to, i128 g, i128 lo, i128 hi, i128 step) {
  const i128 a = std::max(from, lo), b = std::min(to, hi);
  if (a > b) return false;
  const i128 t = ceil_div(a - from, g), t_max = floor_div(b - from, g);
  if (step == 0) return t <= t_max;
  // g*k = -from (mod step)
  const i128 d = gcd(g, step), m = step / d;
  i128 c = (-from) % step;
  if (c < 0) c += step;
  if (c % d != 0) return false;
  const i128 k0 = mul_mod(c / d % m, inverse(g / d % m, m), m);
  i128 r = (k0 - t) % m;
  if (r < 0) r += m;
  return r <= t_max - t;
}

// A decimal text (a JSON number: -?digits(.digits)?([eE][+-]?digits)?) in units, rounded up
// (toward +inf) or down where it has more than 18 fraction digits; `exact` says whether it had
// not. Magnitudes past kNumCap are kNumCap.
inline i128 to_units(std::string_view text, bool up, bool* exact = nullptr) {
  std::size_t i = 0;
  const bool neg = i < text.size() && text[i] == '-';
  if (neg) i++;
  i128 m = 0;
  int shift = 18, kept = 0;  // value = m * 10^(shift - 18) units... in units: m * 10^shift
  bool rest = false;         // digits dropped past 36 kept ones (not all zero)
  for (bool frac = false; i < text.size(); i++) {
    const char c = text[i];
    if (c == '.') {
      frac = true;
      continue;
    }
    if (c < '0' || c > '9') break;
    if (kept < 36) {
      m = m * 10 + (c - '0');
      kept += m != 0;
      if (frac) shift--;
    } else {
      rest = rest || c != '0';
      if (!frac) shift++;
    }
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    i++;
    const bool eneg = i < text.size() && text[i] == '-';
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) i++;
    int e = 0;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; i++)
      e = std::min(e * 10 + (text[i] - '0'), 1000);
    shift += eneg ? -e : e;
  }
  i128 mag;
  bool lost = rest;
  if (m == 0) {
    mag = 0;
  } else if (shift >= 0) {
    int digits = 0;
    for (i128 x = m; x > 0; x /= 10) digits++;
    mag = digits + shift > 34 ? kNumCap : std::min(m * pow10(shift), kNumCap);
    lost = lost || mag == kNumCap;
  } else {
    const i128 p = shift < -36 ? 0 : pow10(-shift);
    mag = p == 0 ? 0 : m / p;
    lost = lost || p == 0 || m % p != 0;
  }
  if (exact) *exact = !lost;
  // Round the magnitude away from zero where that is the asked direction.
  if (lost && mag < kNumCap && up != neg) mag++;
  return neg ? -mag : mag;
}

// Integers: the values from the digits so far, m * 10^k .. m * 10^k + 10^k - 1 (negated after a
// '-'), for k more digits; the fewest k that reaches a value in range (kInf: none).
inline int int_more_digits(const Node& nd, const Frame& f) {
  if (!nd.bounded()) return 0;
  const bool neg = f.a != 0;
  const i128 m = static_cast<i128>(f.bits);
  const int kmax = f.phase == phase::I_ZERO ? 0 : 18 - f.count;
  i128 p = 1;  // 10^k
  for (int k = 0; k <= kmax; k++, p *= 10) {
    const i128 lo_m = m * p, hi_m = m * p + p - 1;
    const i128 lo = std::max<i128>(neg ? -hi_m : lo_m, nd.lo),
               hi = std::min<i128>(neg ? -lo_m : hi_m, nd.hi);
    if (lo <= hi && (nd.multiple == 0 || ceil_div(lo, nd.multiple) * nd.multiple <= hi)) return k;
  }
  return kInf;
}
inline bool int_feasible(const Node& nd, const Frame& f) {
  return int_more_digits(nd, f) < kInf;
}
inline bool int_in_range(const Node& nd, const Frame& f) {
  if (!nd.bounded()) return true;
  const i128 v = f.a ? -static_cast<i128>(f.bits) : static_cast<i128>(f.bits);
  return v >= nd.lo && v <= nd.hi && (nd.multiple == 0 || v % nd.multiple == 0);
}

// Numbers. A bounded number's frame: a = '-' written; bits = its digits so far as one integer;
// count = digits of the current part; b = integer digits, once past the '.'.
struct Span {
  i128 lo, hi, step;  // of magnitudes
};
inline Span magnitudes(const DecimalRange& r, bool neg) {
  return neg ? Span{std::max<i128>(0, -r.hi), -r.lo, r.step}
             : Span{std::max<i128>(0, r.lo), r.hi, r.step};
}
inline int frac_max(int int_digits) {
  return kDigits - int_digits;
}

// The fewest more bytes after which the number holds a value in range (kInf: none); with kAny,
// 0 as soon as some value is reachable at all, each length then trying only its finest grid of
// fractions (a point of a coarser grid is on the finest one too), since the matcher asks that
// for every byte of every candidate token. Phase N_MINUS with a = 0 is a number not yet begun.
template <bool kAny = false>
inline int num_more_bytes(const DecimalRange& r, const Frame& f) {
  using namespace phase;
  const Span s = magnitudes(r, f.a != 0);
  if (s.lo > s.hi) return kInf;
  const i128 digits = static_cast<i128>(f.bits);
  if (f.phase == N_DOT || f.phase == N_FRAC) {
    const int d = f.phase == N_FRAC ? f.count : 0, first = std::max(d, 1), last = frac_max(f.b);
    const i128 base = digits * pow10(18 - d), width = pow10(18 - d);
    for (int e = kAny ? std::max(first, last) : first; e <= last; e++)  // e fraction digits
      if (hit(base, base + width - pow10(18 - e), pow10(18 - e), s.lo, s.hi, s.step))
        return kAny ? 0 : e - d;
    return kInf;
  }
  if (f.phase != N_MINUS && f.phase != N_ZERO && f.phase != N_INT) return kInf;
  const int k = f.phase == N_MINUS ? 0 : f.phase == N_ZERO ? 1 : f.count;
  const int j_max = f.phase == N_ZERO ? 0 : kIntDigits - k;
  int best = kInf;
  for (int j = k == 0 ? 1 : 0; j <= j_max && j < best; j++) {  // j more integer digits
    const i128 p = pow10(j);
    const i128 lo = k > 0    ? digits * p
                    : j == 1 ? 0
                             : p / 10,
               hi = k > 0 ? digits * p + p - 1 : p - 1;
    if (lo * kUnit > s.hi) break;  // more digits only go further
    const int last = frac_max(k + j);
    if constexpr (kAny) {
      const i128 g = last >= 1 ? pow10(18 - last) : kUnit;
      if (hit(lo * kUnit, hi * kUnit + kUnit - g, g, s.lo, s.hi, s.step)) return 0;
      continue;
    }
    if (hit(lo * kUnit, hi * kUnit, kUnit, s.lo, s.hi, s.step)) {
      best = j;
      break;
    }
    for (int e = 1; e <= last && j + 1 + e < best; e++) {
      const i128 g = pow10(18 - e);
      if (hit(lo * kUnit, hi * kUnit + kUnit - g, g, s.lo, s.hi, s.step)) best = j + 1 + e;
    }
  }
  return best;
}
// Whether some value in range is still reachable.
inline bool number_feasible(const DecimalRange& r, const Frame& f) {
  return num_more_bytes<true>(r, f) < kInf;
}
inline bool number_in_range(const DecimalRange& r, const Frame& f) {
  using namespace phase;
  if (f.phase != N_ZERO && f.phase != N_INT && f.phase != N_FRAC) return false;
  const Span s = magnitudes(r, f.a != 0);
  const i128 v = static_cast<i128>(f.bits) * pow10(18 - (f.phase == N_FRAC ? f.count : 0));
  return v >= s.lo && v <= s.hi && (s.step == 0 || v % s.step == 0);
}

// The shortest texts of a bounded integer and number.
inline int integer_shortest(const Node& nd) {
  int best = kInf;
  for (int sign = 0; sign <= 1; sign++)
    for (int d = 0; d <= 9; d++) {
      const Frame f{0,          d == 0 ? phase::I_ZERO : phase::I_DIGITS, uint8_t(sign), 0, 0, 1, 0,
                    uint64_t(d)};
      best = std::min(best, sign + 1 + int_more_digits(nd, f));
    }
  return best;
}
inline int number_shortest(const DecimalRange& r) {
  const Frame pos{0, phase::N_MINUS, 0, 0, 0, 0, 0, 0}, neg{0, phase::N_MINUS, 1, 0, 0, 0, 0, 0};
  return std::min<long>(num_more_bytes(r, pos), 1L + num_more_bytes(r, neg));
}

}  // namespace servekit::constrain::range
