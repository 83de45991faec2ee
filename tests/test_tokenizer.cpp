// SPDX-License-Identifier: Apache-2.0
// Every fixture text encodes to exactly the ids HF's GPT2TokenizerFast gave
// (tools/make_tokenizer_fixture.py), from either file layout, and decodes back to itself.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "servekit/text/tokenizer.hpp"

namespace fs = std::filesystem;
using servekit::text::Gpt2Tokenizer;

namespace {

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<Case> load_cases() {
  const fs::path path = fs::path(SERVEKIT_FIXTURES) / "tokenizer" / "cases.jsonl";
  std::ifstream in(path);
  REQUIRE(in.good());
  std::vector<Case> cases;
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    cases.push_back({j.at("text").get<std::string>(), j.at("ids").get<std::vector<int32_t>>()});
  }
  return cases;
}

const Gpt2Tokenizer& gpt2() {
  static const Gpt2Tokenizer tok = Gpt2Tokenizer::from_dir(fs::path(SERVEKIT_DATA) / "gpt2");
  return tok;
}

// Printable form of a case for failure messages.
std::string show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

}  // namespace

TEST_CASE("GPT-2 vocabulary loads with its special token", "[text]") {
  const auto& tok = gpt2();
  CHECK(tok.vocab_size() == 50257);
  CHECK(tok.eos_id() == 50256);
  CHECK(tok.token_bytes(tok.eos_id()) == "<|endoftext|>");
  CHECK(tok.merge_count() == 50000);
}

TEST_CASE("encode matches HF GPT2TokenizerFast on every fixture case", "[text]") {
  const auto cases = load_cases();
  REQUIRE(cases.size() >= 220);
  const auto& tok = gpt2();
  // Twice: the first pass fills the word cache, the second reads from it.
  for (int pass = 0; pass < 2; ++pass) {
    size_t matched = 0;
    for (const auto& c : cases) {
      const auto ids = tok.encode(c.text);
      INFO("pass " << pass << " text " << nlohmann::json(c.text).dump());
      INFO("got  " << show(ids) << "\nwant " << show(c.ids));
      CHECK(ids == c.ids);
      matched += ids == c.ids;
    }
    CHECK(matched == cases.size());
  }
}

TEST_CASE("decode(encode(text)) gives the text back", "[text]") {
  const auto& tok = gpt2();
  for (const auto& c : load_cases()) {
    INFO(nlohmann::json(c.text).dump());
    CHECK(tok.decode(c.ids) == c.text);
    CHECK(tok.decode(tok.encode(c.text)) == c.text);
  }
  // Not UTF-8 (a Python str cannot hold it): every byte still lands in some token.
  const std::string raw =
      std::string("ab\xff\xfe cd \xc3 \xe2\x82 \xf0\x9f\x98") + "\x80\x80 end\xed\xa0\x80";
  CHECK(tok.decode(tok.encode(raw)) == raw);
}

TEST_CASE("token_bytes concatenate to decode", "[text]") {
  const auto& tok = gpt2();
  const auto cases = load_cases();
  for (const auto& c : cases) {
    std::string joined;
    for (int32_t id : c.ids) joined += tok.token_bytes(id);
    CHECK(joined == tok.decode(c.ids));
  }
}

TEST_CASE("OpenAI and HF file layouts give the same ids", "[text]") {
  const fs::path src = fs::path(SERVEKIT_DATA) / "gpt2";
  const fs::path dir = fs::temp_directory_path() / "servekit_test_tokenizer_hf_layout";
  fs::remove_all(dir);
  fs::create_directories(dir);
  // HF's vocab.json is encoder.json's mapping (written here re-serialised, keys sorted) and
  // merges.txt is vocab.bpe.
  {
    std::ifstream in(src / "encoder.json");
    const auto vocab = nlohmann::json::parse(in);
    std::ofstream(dir / "vocab.json") << vocab.dump(2);
  }
  fs::copy_file(src / "vocab.bpe", dir / "merges.txt");
  const auto hf = Gpt2Tokenizer::from_dir(dir);
  const auto files = Gpt2Tokenizer::from_files(dir / "vocab.json", dir / "merges.txt");
  const auto& openai = gpt2();
  CHECK(hf.vocab_size() == openai.vocab_size());
  CHECK(hf.eos_id() == openai.eos_id());
  for (int32_t id = 0; id < openai.vocab_size(); ++id) {
    if (hf.token_bytes(id) != openai.token_bytes(id)) FAIL("token " << id << " differs");
  }
  for (const auto& c : load_cases()) {
    INFO(nlohmann::json(c.text).dump());
    CHECK(hf.encode(c.text) == c.ids);
    CHECK(files.encode(c.text) == c.ids);
  }
  fs::remove_all(dir);
}

TEST_CASE("encode from several threads at once agrees with one thread", "[text]") {
  const auto cases = load_cases();
  // A fresh tokenizer so the threads race on filling the word cache too.
  const auto tok = Gpt2Tokenizer::from_dir(fs::path(SERVEKIT_DATA) / "gpt2");
  std::vector<std::vector<std::vector<int32_t>>> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] {
      for (size_t k = 0; k < cases.size(); ++k) {
        const auto& c = cases[(k + t * 37) % cases.size()];
        got[t].push_back(tok.encode(c.text));
      }
    });
  }
  for (auto& th : threads) th.join();
  for (size_t t = 0; t < got.size(); ++t)
    for (size_t k = 0; k < cases.size(); ++k)
      CHECK(got[t][k] == cases[(k + t * 37) % cases.size()].ids);
  CHECK(tok.cached_words() > 0);
}
