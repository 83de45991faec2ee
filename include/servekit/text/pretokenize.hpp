// SPDX-License-Identifier: Apache-2.0
#pragma once
// GPT-2's pre-split, written as a scanner. It reproduces the regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// as Hugging Face tokenizers evaluates it (Oniguruma: first matching alternative wins, \s is the
// Unicode White_Space property, \p{L} = Lu|Ll|Lt|Lm|Lo, \p{N} = Nd|Nl|No). The classes come from
// ICU. Invalid UTF-8 bytes (which a Python str cannot hold) count as one "other" character each,
// so every byte of the input lands in exactly one pre-token.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <unicode/uchar.h>
#include <unicode/utf8.h>

namespace servekit::text {

enum class CharClass : uint8_t { Letter, Number, Space, Other };

// Class of one code point (not called for ASCII in the scanner, which has a table).
inline CharClass classify(UChar32 c) {
  if (c < 0) return CharClass::Other;  // invalid UTF-8
  if (u_isUWhiteSpace(c)) return CharClass::Space;
  const uint32_t mask = U_GET_GC_MASK(c);
  if (mask & U_GC_L_MASK) return CharClass::Letter;
  if (mask & U_GC_N_MASK) return CharClass::Number;
  return CharClass::Other;
}

namespace detail {

struct Ascii {
  CharClass cls[128];
  constexpr Ascii() : cls{} {
    for (int c = 0; c < 128; ++c) {
      const bool space = (c >= '\t' && c <= '\r') || c == ' ';  // not 0x1C-0x1F: not White_Space
      const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
      const bool digit = c >= '0' && c <= '9';
      cls[c] = space    ? CharClass::Space
               : letter ? CharClass::Letter
               : digit  ? CharClass::Number
                        : CharClass::Other;
    }
  }
};
inline constexpr Ascii kAscii{};

struct Char {
  CharClass cls;
  uint32_t len;  // bytes
};

// The character that starts at byte i of s (i < s.size()).
inline Char char_at(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return {kAscii.cls[b], 1};
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  int32_t j = int32_t(i);
  UChar32 c;
  U8_NEXT(p, j, int32_t(s.size()), c);
  // ICU consumes a maximal invalid subpart at once; keep it but as one "other" char per byte so
  // the split never depends on how much of an invalid run ICU swallows.
  if (c < 0) return {CharClass::Other, 1};
  return {classify(c), uint32_t(j - int32_t(i))};
}

// End of the run of characters of class cls starting at byte i.
inline size_t run_end(std::string_view s, size_t i, CharClass cls) {
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      if (kAscii.cls[b] != cls) break;
      ++i;
      continue;
    }
    const Char ch = char_at(s, i);
    if (ch.cls != cls) break;
    i += ch.len;
  }
  return i;
}

}  // namespace detail

// End (exclusive, in bytes) of the pre-token that starts at byte i (i < s.size()).
inline size_t pretoken_end(std::string_view s, size_t i) {
  using detail::char_at;
  using detail::run_end;
  const size_t n = s.size();
  // 's 't 'm 'd 're 've 'll: lower case only, tried before everything else.
  if (s[i] == '\'' && i + 1 < n) {
    const char a = s[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 < n) {
      const char b = s[i + 2];
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
  }
  const detail::Char first = char_at(s, i);
  //  ?\p{L}+ | ?\p{N}+ | ?[^\s\p{L}\p{N}]+ : one leading U+0020 joins the run that follows it.
  if (s[i] == ' ' && i + 1 < n) {
    const detail::Char second = char_at(s, i + 1);
    if (second.cls != CharClass::Space) return run_end(s, i + 1 + second.len, second.cls);
  }
  if (first.cls != CharClass::Space) return run_end(s, i + first.len, first.cls);
  // \s+(?!\S) | \s+ : a whitespace run; when a non-space follows, its last character is left to
  // start the next pre-token (so " word" keeps its space), unless the run is a single character.
  size_t last = i;  // start of the run's last character
  size_t end = i + first.len;
  while (end < n) {
    const detail::Char ch = char_at(s, end);
    if (ch.cls != CharClass::Space) break;
    last = end;
    end += ch.len;
  }
  if (end == n || last == i) return end;
  return last;
}

// Calls f(std::string_view piece) for each pre-token of s, in order; the pieces tile s.
template <class F>
void for_each_pretoken(std::string_view s, F&& f) {
  for (size_t i = 0; i < s.size();) {
    const size_t end = pretoken_end(s, i);
    f(s.substr(i, end - i));
    i = end;
  }
}

}  // namespace servekit::text
