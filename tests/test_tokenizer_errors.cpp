// SPDX-License-Identifier: Apache-2.0
// Bad tokenizer files and bad ids: each error names the file, line or value at fault.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "servekit/text/tokenizer.hpp"

namespace fs = std::filesystem;
using Catch::Contains;
using servekit::text::Gpt2Tokenizer;
using servekit::text::StreamDecoder;

namespace {

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) : path(fs::temp_directory_path() / name) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path write(const std::string& name, const std::string& content) const {
    std::ofstream(path / name, std::ios::binary) << content;
    return path / name;
  }
};

// A minimal byte-level vocabulary: the 256 byte tokens (as GPT-2 writes them), plus extras.
nlohmann::json byte_vocab() {
  nlohmann::json v = nlohmann::json::object();
  const auto table = servekit::text::byte_to_unicode();
  for (int b = 0; b < 256; ++b) {
    std::string key;
    const char32_t c = table[b];
    if (c < 0x80) {
      key = char(c);
    } else {  // all below U+0800: two bytes
      key += char(0xC0 | (c >> 6));
      key += char(0x80 | (c & 0x3F));
    }
    v[key] = b;
  }
  v["ab"] = 256;
  v["<|endoftext|>"] = 257;
  return v;
}

// The message of the error that loading (vocab, merges) throws: it must throw.
std::string load_error(const fs::path& vocab, const fs::path& merges) {
  try {
    (void)Gpt2Tokenizer::from_files(vocab, merges);
  } catch (const servekit::Error& e) {
    return e.what();
  }
  FAIL("the tokenizer loaded");
  return {};
}

}  // namespace

TEST_CASE("from_dir names the files it looked for", "[text]") {
  TempDir dir("servekit_tok_err_dir");
  REQUIRE_THROWS_WITH(Gpt2Tokenizer::from_dir(dir.path),
                      Contains("encoder.json + vocab.bpe") && Contains("vocab.json + merges.txt") &&
                          Contains(dir.path.string()) && Contains("none of them"));
  dir.write("vocab.json", byte_vocab().dump());
  REQUIRE_THROWS_WITH(Gpt2Tokenizer::from_dir(dir.path), Contains("found vocab.json"));
}

TEST_CASE("a missing file is named", "[text]") {
  TempDir dir("servekit_tok_err_missing");
  const auto vocab = dir.write("vocab.json", byte_vocab().dump());
  REQUIRE_THROWS_WITH(Gpt2Tokenizer::from_files(dir.path / "nope.json", dir.path / "merges.txt"),
                      Contains("nope.json") && Contains("cannot open"));
  REQUIRE_THROWS_WITH(Gpt2Tokenizer::from_files(vocab, dir.path / "merges.txt"),
                      Contains("merges.txt") && Contains("cannot open"));
}

TEST_CASE("a malformed vocabulary is reported with its file", "[text]") {
  TempDir dir("servekit_tok_err_vocab");
  const auto merges = dir.write("merges.txt", "#version: 0.2\n");
  const auto bad = dir.write("bad.json", "{\"a\": 1,");
  REQUIRE_THROWS_WITH(Gpt2Tokenizer::from_files(bad, merges),
                      Contains("bad.json") && Contains("malformed JSON"));
  const auto arr = dir.write("array.json", "[1, 2]");
  REQUIRE_THROWS_WITH(Gpt2Tokenizer::from_files(arr, merges),
                      Contains("array.json") && Contains("expected a JSON object"));
  auto v = byte_vocab();
  v["ab"] = "x";
  const auto str_id = dir.write("str_id.json", v.dump());
  REQUIRE_THROWS_WITH(Gpt2Tokenizer::from_files(str_id, merges),
                      Contains("str_id.json") && Contains("\"ab\"") && Contains("non-integer"));
  v = byte_vocab();
  v["ab"] = 999;
  const auto far = dir.write("far.json", v.dump());
  REQUIRE_THROWS_WITH(Gpt2Tokenizer::from_files(far, merges),
                      Contains("far.json") && Contains("\"ab\" has id 999"));
  v = byte_vocab();
  v.erase("A");
  v["zz"] = int('A');
  const auto no_byte = dir.write("no_byte.json", v.dump());
  REQUIRE_THROWS_WITH(Gpt2Tokenizer::from_files(no_byte, merges),
                      Contains("no_byte.json") && Contains("no token for byte 65"));
  // Ids past int64 are shown as written, not wrapped to a negative number.
  for (const char* id : {"9223372036854775808", "18446744073709551615", "-1"}) {
    std::string text = byte_vocab().dump();
    text.insert(text.size() - 1, std::string(",\"huge\":") + id);
    const auto huge = dir.write("huge.json", text);
    REQUIRE_THROWS_WITH(Gpt2Tokenizer::from_files(huge, merges),
                        Contains("\"huge\" has id " + std::string(id) + ", outside 0..258"));
  }
  // A 1 MB token is quoted by its first bytes and its length, not echoed whole.
  v = byte_vocab();
  v[std::string(1'000'000, 'q')] = -3;
  const auto long_key = dir.write("long_key.json", v.dump());
  const std::string msg = load_error(long_key, merges);
  CHECK(msg.size() < 400);
  CHECK_THAT(msg, Contains("long_key.json") && Contains("qqqq...") &&
                      Contains("(1000000 bytes) has id -3"));
}

TEST_CASE("a malformed merges line is reported with file and line number", "[text]") {
  TempDir dir("servekit_tok_err_merges");
  const auto vocab = dir.write("vocab.json", byte_vocab().dump());
  const auto good = dir.write("good.txt", "#version: 0.2\na b\n");
  const auto tok = Gpt2Tokenizer::from_files(vocab, good);
  CHECK(tok.vocab_size() == 258);
  CHECK(tok.eos_id() == 257);
  for (const std::string line : {"abc", "a  b", "a b c", " a", "a ", ""}) {
    const auto merges = dir.write("merges.txt", "#version: 0.2\na b\n" + line + "\na b\n");
    REQUIRE_THROWS_WITH(Gpt2Tokenizer::from_files(vocab, merges),
                        Contains("merges.txt line 3") && Contains("two tokens"));
  }
  // A 5 MB line is quoted by its first bytes and its length, not echoed whole.
  const auto merges =
      dir.write("merges.txt", "#version: 0.2\n" + std::string(5'000'000, 'z') + "\n");
  std::string msg = load_error(vocab, merges);
  CHECK(msg.size() < 400);
  CHECK_THAT(msg,
             Contains("merges.txt line 2") && Contains("zzz...") && Contains("(5000000 bytes)"));
  // A long token that is not in the vocabulary is quoted the same way.
  const auto oov =
      dir.write("merges.txt", "#version: 0.2\n" + std::string(2'000'000, 'y') + " a\n");
  msg = load_error(vocab, oov);
  CHECK(msg.size() < 400);
  CHECK_THAT(msg, Contains("(2000000 bytes) is not in the vocabulary"));
}

TEST_CASE("a merge whose parts are not in the vocabulary is named", "[text]") {
  TempDir dir("servekit_tok_err_oov");
  const auto vocab = dir.write("vocab.json", byte_vocab().dump());
  auto merges = dir.write("merges.txt", "#version: 0.2\na b\nab c\n");
  // "ab c" parts are known but "abc" is not a token.
  REQUIRE_THROWS_WITH(Gpt2Tokenizer::from_files(vocab, merges),
                      Contains("merges.txt line 3") && Contains("\"abc\"") &&
                          Contains("not in the vocabulary") && Contains("vocab.json"));
  merges = dir.write("merges.txt", "#version: 0.2\nxy z\n");
  REQUIRE_THROWS_WITH(Gpt2Tokenizer::from_files(vocab, merges),
                      Contains("merges.txt line 2") && Contains("\"xy\""));
}

TEST_CASE("an out-of-range id names the id and the vocab size", "[text]") {
  const auto tok = Gpt2Tokenizer::from_dir(fs::path(SERVEKIT_DATA) / "gpt2");
  const std::vector<int32_t> ids = {15496, 50257};
  REQUIRE_THROWS_WITH(tok.decode(ids),
                      Contains("token id 50257") && Contains("vocab size is 50257"));
  REQUIRE_THROWS_WITH(tok.token_bytes(-1), Contains("token id -1") && Contains("50257"));
  REQUIRE_THROWS_WITH(tok.token_bytes(1 << 30), Contains("token id 1073741824"));
  StreamDecoder dec(tok);
  REQUIRE_THROWS_WITH(dec.push(60000), Contains("token id 60000"));
  CHECK_NOTHROW(tok.token_bytes(50256));
}

TEST_CASE("vocab_dir_for: --vocab, else the model folder's own files, else GPT-2's") {
  namespace text = servekit::text;
  const fs::path dir = fs::temp_directory_path() / "servekit_vocab_dir_for";
  fs::remove_all(dir);
  fs::create_directories(dir);
  CHECK(text::vocab_dir_for("/some/vocab", dir) == "/some/vocab");
  CHECK(text::vocab_dir_for({}, dir) == text::default_vocab_dir());  // no tokenizer files
  CHECK(text::vocab_dir_for({}, {}) == text::default_vocab_dir());
  // One file of a pair: the folder's own tokenizer, which then fails naming what is missing,
  // never a silent fall back to GPT-2's ids.
  std::ofstream(dir / "merges.txt") << "#version: 0.2\n";
  CHECK(text::vocab_dir_for({}, dir) == dir);
  REQUIRE_THROWS_WITH(Gpt2Tokenizer::from_dir(text::vocab_dir_for({}, dir)),
                      Contains("vocab.json"));
  fs::remove_all(dir);
}
