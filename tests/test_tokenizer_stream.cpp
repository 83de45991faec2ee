// SPDX-License-Identifier: Apache-2.0
// StreamDecoder: ids pushed one by one come out as whole characters only, and all chunks joined
// are the text.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unicode/utf8.h>

#include "servekit/text/tokenizer.hpp"

namespace fs = std::filesystem;
using servekit::text::Gpt2Tokenizer;
using servekit::text::StreamDecoder;

namespace {

const Gpt2Tokenizer& gpt2() {
  static const Gpt2Tokenizer tok = Gpt2Tokenizer::from_dir(fs::path(SERVEKIT_DATA) / "gpt2");
  return tok;
}

// Checked with ICU, independently of the decoder's own UTF-8 code.
bool valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  for (int32_t i = 0, n = int32_t(s.size()); i < n;) {
    UChar32 c;
    U8_NEXT(p, i, n, c);
    if (c < 0) return false;
  }
  return true;
}

std::vector<std::string> fixture_texts() {
  std::ifstream in(fs::path(SERVEKIT_FIXTURES) / "tokenizer" / "cases.jsonl");
  REQUIRE(in.good());
  std::vector<std::string> texts;
  std::string line;
  while (std::getline(in, line)) texts.push_back(nlohmann::json::parse(line).at("text"));
  return texts;
}

}  // namespace

TEST_CASE("streamed chunks are whole characters and join to the text", "[text]") {
  const auto& tok = gpt2();
  size_t split_chars = 0;
  for (const auto& text : fixture_texts()) {
    const auto ids = tok.encode(text);
    StreamDecoder dec(tok);
    std::string joined;
    for (int32_t id : ids) {
      const std::string chunk = dec.push(id);
      if (!valid_utf8(chunk)) FAIL("chunk is not valid UTF-8 in " << nlohmann::json(text).dump());
      split_chars += chunk.empty() || dec.pending_bytes() > 0;
      joined += chunk;
    }
    CHECK(dec.pending_bytes() == 0);
    CHECK(dec.flush().empty());
    INFO(nlohmann::json(text).dump());
    CHECK(joined == text);
  }
  // The fixture must actually split characters across tokens, or this test proves nothing.
  CHECK(split_chars > 100);
}

TEST_CASE("an emoji split over tokens is held back until complete", "[text]") {
  const auto& tok = gpt2();
  const std::string text = "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 ok";  // man ZWJ woman
  const auto ids = tok.encode(text);
  std::vector<std::string> chunks;
  StreamDecoder dec(tok);
  for (int32_t id : ids) chunks.push_back(dec.push(id));
  std::string joined;
  for (const auto& c : chunks) {
    CHECK(valid_utf8(c));
    joined += c;
  }
  CHECK(joined == text);
  // GPT-2 has no single token for U+1F468, so at least one push returned nothing.
  CHECK(ids.size() > 5);
  CHECK(std::count(chunks.begin(), chunks.end(), std::string()) > 0);
}

TEST_CASE("flush turns an unfinished character into U+FFFD", "[text]") {
  const auto& tok = gpt2();
  // The first byte of a 4-byte emoji alone: a valid prefix that never completes.
  const auto ids = tok.encode("x\xF0\x9F");
  StreamDecoder dec(tok);
  std::string out;
  for (int32_t id : ids) out += dec.push(id);
  CHECK(out == "x");
  CHECK(dec.pending_bytes() == 2);
  CHECK(dec.flush() == "\xEF\xBF\xBD");
  CHECK(dec.pending_bytes() == 0);
  CHECK(dec.flush().empty());
}

TEST_CASE("bytes that can never be a character come out as U+FFFD at once", "[text]") {
  const auto& tok = gpt2();
  // A lone continuation byte, then a lead byte followed by ASCII (maximal subpart: one U+FFFD).
  const auto ids = tok.encode("a\x80 b\xE2z");
  StreamDecoder dec(tok);
  std::string out;
  for (int32_t id : ids) {
    const std::string chunk = dec.push(id);
    CHECK(valid_utf8(chunk));
    out += chunk;
  }
  out += dec.flush();
  CHECK(out == "a\xEF\xBF\xBD b\xEF\xBF\xBDz");
}

TEST_CASE("is_valid_utf8 agrees with ICU", "[text]") {
  std::vector<std::string> samples = fixture_texts();
  for (const char* bad : {"\x80", "\xC0\xAF", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                          "\xF0\x9F\x98", "a\xFF", "\xC2", "\xF5\x80\x80\x80"})
    samples.push_back(bad);
  for (const auto& s : samples) {
    INFO("sample of " << s.size() << " bytes");
    CHECK(servekit::text::is_valid_utf8(s) == valid_utf8(s));
  }
}
