// SPDX-License-Identifier: Apache-2.0
// The pre-split sees each code point in the class HF's regex engine gives it. Probed the same way
// tools/make_tokenizer_fixture.py probes HF: "a"+c is one pre-token only if c is a letter, "1"+c
// only if a number, "!"+c only if neither and not whitespace, "\t"+c+"\t" if whitespace.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include "servekit/text/pretokenize.hpp"

namespace fs = std::filesystem;
using namespace servekit::text;

namespace {

bool one_piece(const std::string& s) {
  return pretoken_end(s, 0) == s.size();
}

char probe(UChar32 c) {
  char buf[4];
  int32_t n = 0;
  U8_APPEND_UNSAFE(reinterpret_cast<uint8_t*>(buf), n, c);
  const std::string ch(buf, size_t(n));
  if (one_piece("a" + ch)) return 'L';
  if (one_piece("1" + ch)) return 'N';
  if (one_piece("!" + ch)) return 'P';
  if (one_piece("\t" + ch + "\t")) return 'S';
  return '?';
}

}  // namespace

TEST_CASE("pre-split classes match HF for every code point ICU knows", "[text]") {
  std::ifstream in(fs::path(SERVEKIT_FIXTURES) / "tokenizer" / "classes.txt");
  REQUIRE(in.good());
  std::vector<char> hf(0x110000, '?');
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    unsigned first = 0, last = 0;
    char cls = 0;
    ls >> std::hex >> first >> last >> cls;
    REQUIRE(last < hf.size());
    for (unsigned c = first; c <= last; ++c) hf[c] = cls;
  }
  size_t checked = 0, newer = 0;
  for (UChar32 c = 0; c < 0x110000; ++c) {
    if (c >= 0xD800 && c < 0xE000) continue;
    REQUIRE(hf[size_t(c)] != '?');
    const char ours = probe(c);
    if (ours != hf[size_t(c)] && u_charType(c) == U_UNASSIGNED) {
      ++newer;  // assigned in a newer Unicode than the ICU this links against
      continue;
    }
    if (ours != hf[size_t(c)])
      FAIL("U+" << std::hex << c << ": HF " << hf[size_t(c)] << ", ours " << ours);
    ++checked;
  }
  UVersionInfo v;
  u_getUnicodeVersion(v);
  WARN(checked << " code points match; " << newer << " are unassigned in this ICU's Unicode "
               << int(v[0]) << "." << int(v[1]) << " but assigned in HF's tables");
  CHECK(checked > 1100000);
}

TEST_CASE("classify agrees with the scanner's ASCII table", "[text]") {
  for (int c = 0; c < 128; ++c) {
    INFO("byte " << c);
    CHECK(classify(c) == detail::kAscii.cls[c]);
  }
}
