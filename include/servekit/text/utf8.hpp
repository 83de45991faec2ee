// SPDX-License-Identifier: Apache-2.0
#pragma once
// UTF-8 framing for text that arrives in pieces: how much of a byte string is whole characters,
// and U+FFFD for what can never become one (Unicode's "maximal subpart" rule, as ICU and
// Python's errors="replace" apply it).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace servekit::text {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

enum class Utf8Status { Complete, Incomplete, Invalid };

struct Utf8Step {
  Utf8Status status;
  size_t len;  // Complete: bytes of the character; Invalid: bytes to replace by one U+FFFD;
               // Incomplete: bytes present (a valid prefix that needs more)
};

// Looks at the character starting at s[0] (s not empty).
inline Utf8Step utf8_step(std::string_view s) {
  const auto b0 = static_cast<unsigned char>(s[0]);
  if (b0 < 0x80) return {Utf8Status::Complete, 1};
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Unicode table 3-7)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlongs
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {Utf8Status::Invalid, 1};
  }
  for (size_t k = 1; k < need; ++k) {
    if (k == s.size()) return {Utf8Status::Incomplete, k};
    const auto b = static_cast<unsigned char>(s[k]);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return {Utf8Status::Invalid, k};
  }
  return {Utf8Status::Complete, need};
}

// Moves the whole characters at the front of pending to out (invalid bytes as U+FFFD) and leaves
// only an incomplete last character in pending.
inline void take_complete_utf8(std::string& pending, std::string& out) {
  size_t i = 0;
  while (i < pending.size()) {
    const Utf8Step st = utf8_step(std::string_view(pending).substr(i));
    if (st.status == Utf8Status::Incomplete) break;
    if (st.status == Utf8Status::Complete)
      out.append(pending, i, st.len);
    else
      out += kReplacementChar;
    i += st.len;
  }
  pending.erase(0, i);
}

// True when s is entirely well-formed UTF-8.
inline bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const Utf8Step st = utf8_step(s.substr(i));
    if (st.status != Utf8Status::Complete) return false;
    i += st.len;
  }
  return true;
}

}  // namespace servekit::text
