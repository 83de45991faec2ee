// SPDX-License-Identifier: Apache-2.0
#pragma once
// GPT-2's byte <-> unicode table. BPE vocabularies store every byte as a printable character so
// that a token is a plain string: printable Latin-1 bytes map to themselves, the other 68 bytes
// (controls, space, 0x7F-0xA0, 0xAD) map to U+0100.. in byte order. "Ġ" (U+0120) is the space.
#include <array>
#include <cstdint>

namespace servekit::text {

// byte_to_unicode()[b] = the code point that stands for byte b in encoder.json / vocab.bpe.
constexpr std::array<char32_t, 256> byte_to_unicode() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    table[b] = printable ? char32_t(b) : next++;
  }
  return table;
}

// unicode_to_byte()[c] for c < 512 is the byte that code point c stands for, or -1. Every code
// point of the table is below 256 + 68, so 512 entries cover it.
constexpr std::array<int16_t, 512> unicode_to_byte() {
  std::array<int16_t, 512> inverse{};
  for (auto& v : inverse) v = -1;
  const auto forward = byte_to_unicode();
  for (int b = 0; b < 256; ++b) inverse[forward[b]] = int16_t(b);
  return inverse;
}

static_assert(byte_to_unicode()[' '] == U'\u0120', "GPT-2 maps the space to U+0120");
static_assert(byte_to_unicode()[0xFF] == 0xFF && byte_to_unicode()[0xAD] == 0x143);

}  // namespace servekit::text
