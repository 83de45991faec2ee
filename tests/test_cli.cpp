// SPDX-License-Identifier: Apache-2.0
// The `servekit` command as scripts use it: JSON in, JSON out, clear errors, exit codes.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/reference.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using Catch::Contains;

namespace {
struct Run {
  int code;
  std::string out;  // stdout and stderr together
};

Run run(const std::string& args, const std::string& stdin_text = "") {
  const fs::path in = fs::temp_directory_path() / "servekit_cli_stdin.txt";
  std::ofstream(in) << stdin_text;
  const std::string cmd = std::string(SERVEKIT_CLI) + " " + args + " < " + in.string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[4096];
  while (std::size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int status = pclose(p);
  return {WEXITSTATUS(status), out};
}

const std::string kVocab = std::string(SERVEKIT_SHARED_DATA) + "/gpt2";
const std::string kTinyA = std::string(SERVEKIT_FIXTURES) + "/tiny-a";

std::string join(const std::vector<int32_t>& v) {
  std::string s;
  for (auto x : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}
}  // namespace

TEST_CASE("tokenize: JSON lines in, HF's ids out, a bad line is reported and skipped") {
  std::ifstream f(std::string(SERVEKIT_FIXTURES) + "/tokenizer/cases.jsonl");
  std::string line, input;
  std::vector<std::vector<int32_t>> want;
  for (int i = 0; i < 40 && std::getline(f, line); i++) {
    auto j = json::parse(line);
    input += json{{"text", j["text"]}}.dump() + "\n";
    want.push_back(j["ids"].get<std::vector<int32_t>>());
  }
  input += "not json\n";
  auto r = run("tokenize --vocab " + kVocab, input);
  CHECK(r.code == 1);  // one bad line
  std::istringstream out(r.out);
  for (std::size_t i = 0; i < want.size(); i++) {
    REQUIRE(std::getline(out, line));
    CHECK(json::parse(line)["ids"].get<std::vector<int32_t>>() == want[i]);
  }
  REQUIRE(std::getline(out, line));
  CHECK_THAT(line, Contains("stdin line 41") && Contains("not valid JSON"));
}

TEST_CASE("generate --json reproduces HF's greedy tokens, with and without the cache") {
  auto ref = servekit::test::load_reference(kTinyA);
  const auto& c = ref.cases.at(2);
  for (std::string flags : {"", " --no-cache"}) {
    auto r = run("generate --model " + kTinyA + " --vocab " + kVocab + " --prompt-ids " +
                 join(c.prompt_ids) + " --max-new-tokens " + std::to_string(c.greedy_ids.size()) +
                 " --json --top-logprobs 3" + flags);
    INFO(r.out);
    REQUIRE(r.code == 0);
    auto j = json::parse(r.out);
    CHECK(j["generated_ids"].get<std::vector<int32_t>>() == c.greedy_ids);
    CHECK(j["prompt_ids"].get<std::vector<int32_t>>() == c.prompt_ids);
    CHECK(j["config"] == "tiny-a/f32/contiguous/none/host");
    CHECK(j["timings"]["token_ms"].size() == c.greedy_ids.size());
    REQUIRE(j["tokens"].size() == c.greedy_ids.size());
    CHECK(j["tokens"][0]["top_logprobs"].size() == 3);
    CHECK(j["tokens"][0]["top_logprobs"][0]["id"] == c.greedy_ids[0]);
  }
}

TEST_CASE("generate: clear errors for bad models and prompts") {
  SECTION("missing model folder names the file") {
    auto r = run("generate --model /nonexistent/gpt2 --vocab " + kVocab + " --prompt hi");
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Contains("/nonexistent/gpt2/config.json"));
  }
  SECTION("an unsupported shape lists the supported ones") {
    const fs::path dir = fs::temp_directory_path() / "servekit_cli_odd_model";
    fs::create_directories(dir);
    std::ofstream(dir / "config.json")
        << R"({"model_type": "gpt2", "n_layer": 5, "n_head": 2, "n_embd": 32,
      "vocab_size": 100, "n_positions": 64, "activation_function": "gelu_new"})";
    auto r = run("generate --model " + dir.string() + " --vocab " + kVocab + " --prompt hi");
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Contains("unsupported model shape: n_layer 5") &&
                          Contains("gpt2-xl (n_layer 48") && Contains("tiny-a"));
  }
  SECTION("a prompt id outside the model's vocabulary") {
    auto r = run("generate --model " + kTinyA + " --vocab " + kVocab + " --prompt-ids 1,600");
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Contains("prompt token 1 has id 600") && Contains("[0, 512)"));
  }
  SECTION("text whose tokens the tiny model does not have") {
    auto r = run("generate --model " + kTinyA + " --vocab " + kVocab + " --prompt 'Hello world'");
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Contains("outside the vocabulary [0, 512)"));
  }
  SECTION("no prompt at all") {
    auto r = run("generate --model " + kTinyA + " --vocab " + kVocab);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Contains("--prompt"));
  }
}
