// SPDX-License-Identifier: Apache-2.0
// The `servekit` command as scripts use it: JSON in, JSON out, clear errors, exit codes.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "servekit/model/dispatch.hpp"
#include "support/reference.hpp"
#include "support/run_cli.hpp"
#include "support/vocab_prefix.hpp"

namespace fs = std::filesystem;
namespace sk = servekit;
using json = nlohmann::json;
using Catch::Contains;

namespace {
using servekit::test::join;
using servekit::test::run;
using servekit::test::run_env;

const std::string kVocab = std::string(SERVEKIT_DATA) + "/gpt2";
const std::string kTinyA = std::string(SERVEKIT_FIXTURES) + "/tiny-a";
const std::string kTinyVocab = std::string(SERVEKIT_FIXTURES) + "/tiny-vocab";

// `servekit batch` on tiny-a with these input lines, in a folder of its own: the output lines.
std::vector<json> run_batch(const std::string& name, const std::vector<std::string>& lines,
                            const std::string& flags = "", std::string* log = nullptr) {
  const fs::path dir = servekit::test::temp_file(name);
  fs::create_directories(dir);
  const fs::path in = dir / "in.jsonl", out = dir / "out.jsonl";
  {
    std::ofstream f(in);
    for (const auto& l : lines) f << l << "\n";
  }
  auto b = run("batch --model " + kTinyA + " --vocab " + kTinyVocab + " --input " + in.string() +
               " --output " + out.string() + flags);
  INFO(b.out);
  if (log) *log = b.out;
  std::ifstream f(out);
  std::vector<json> got;
  for (std::string line; std::getline(f, line);) got.push_back(json::parse(line));
  return got;
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

TEST_CASE("generate --adapter reproduces HF + PEFT's greedy tokens, merged or not") {
  const std::string dir = kTinyA + "/lora/r16";
  auto ref = servekit::test::load_reference(dir);
  const auto& c = ref.cases.at(3);
  for (std::string flags : {"", " --merge"}) {
    INFO("flags: " << flags);
    auto r = run("generate --model " + kTinyA + " --vocab " + kVocab + " --adapter " + dir +
                 " --prompt-ids " + join(c.prompt_ids) + " --max-new-tokens " +
                 std::to_string(c.greedy_ids.size()) + " --ignore-eos --json" + flags);
    INFO(r.out);
    REQUIRE(r.code == 0);
    auto j = json::parse(r.out);
    CHECK(j["generated_ids"].get<std::vector<int32_t>>() == c.greedy_ids);
    CHECK(j["adapter"]["merged"] == !flags.empty());
    CHECK(j["config"] == (flags.empty() ? "tiny-a/f32/contiguous/lora-gathered/host"
                                        : "tiny-a/f32/contiguous/none/host"));
  }
  auto bad = run("generate --model " + kTinyA + " --vocab " + kVocab + " --adapter " + kTinyA +
                 " --prompt-ids 1,2");
  CHECK(bad.code == 2);
  CHECK_THAT(bad.out, Contains("tiny-a: no adapter_config.json"));
  auto merge_alone =
      run("generate --model " + kTinyA + " --vocab " + kVocab + " --merge --prompt-ids 1,2");
  CHECK(merge_alone.code != 0);
  CHECK_THAT(merge_alone.out, Contains("--merge requires --adapter"));
}

TEST_CASE("batch --adapter: lines on different adapters share the engine") {
  const std::string r4 = kTinyA + "/lora/r4", r16 = kTinyA + "/lora/r16";
  auto base = servekit::test::load_reference(kTinyA);
  auto ref4 = servekit::test::load_reference(r4), ref16 = servekit::test::load_reference(r16);
  const fs::path in = servekit::test::temp_file("servekit_cli_batch_lora.jsonl");
  const fs::path out = servekit::test::temp_file("servekit_cli_batch_lora_out.jsonl");
  auto line = [](const servekit::test::RefCase& c, const char* adapter) {
    json j{{"prompt_ids", c.prompt_ids},
           {"max_new_tokens", c.greedy_ids.size()},
           {"ignore_eos", true}};
    if (adapter) j["adapter"] = adapter;
    return j.dump() + "\n";
  };
  std::ofstream(in) << line(ref16.cases[0], "r16") << line(base.cases[2], nullptr)
                    << line(ref4.cases[3], "r4") << line(ref16.cases[3], "r16")
                    << line(base.cases[2], "r8");
  auto r = run("batch --model " + kTinyA + " --vocab " + kVocab + " --adapter " + r4 +
               " --adapter " + r16 + " --input " + in.string() + " --output " + out.string());
  INFO(r.out);
  CHECK(r.code == 1);  // the r8 line: not loaded
  std::ifstream f(out);
  std::vector<json> got;
  for (std::string l; std::getline(f, l);) got.push_back(json::parse(l));
  REQUIRE(got.size() == 5);
  auto ids = [&](int i) { return got[i]["generated_ids"].get<std::vector<int32_t>>(); };
  CHECK(ids(0) == ref16.cases[0].greedy_ids);
  CHECK(ids(1) == base.cases[2].greedy_ids);
  CHECK(ids(2) == ref4.cases[3].greedy_ids);
  CHECK(ids(3) == ref16.cases[3].greedy_ids);
  CHECK_THAT(got[4]["error"].get<std::string>(),
             Contains("line 5") && Contains("adapter 'r8' is not in the model"));
}

TEST_CASE("generate: clear errors for bad models and prompts") {
  SECTION("missing model folder names the file") {
    auto r = run("generate --model /nonexistent/gpt2 --vocab " + kVocab + " --prompt hi");
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Contains("/nonexistent/gpt2/config.json"));
  }
  SECTION("an unsupported shape lists the supported ones") {
    const fs::path dir = servekit::test::temp_file("servekit_cli_odd_model");
    fs::create_directories(dir);
    std::ofstream(dir / "config.json")
        << R"({"model_type": "gpt2", "n_layer": 5, "n_head": 2, "n_embd": 32,
      "vocab_size": 100, "n_positions": 64, "activation_function": "gelu_new"})";
    auto r = run("generate --model " + dir.string() + " --vocab " + kVocab + " --prompt hi");
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Contains("unsupported model shape: n_layer 5"));
    // Every shape the CLI was compiled for (the same list as this test's build), in full.
    std::vector<std::string> shapes;
    [&]<class... Ds>(sk::DimsList<Ds...>) {
      (shapes.push_back(sk::dims_string<Ds>()), ...);
    }(sk::CompiledDims{});
    for (const auto& shape : shapes) CHECK_THAT(r.out, Contains(shape));
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
  SECTION("numbers are taken strictly") {
    const std::string g = "generate --model " + kTinyA + " --vocab " + kVocab + " ";
    struct Case {
      std::string args, msg;
    };
    for (const auto& c : std::vector<Case>{
             {"--prompt-ids ''", "--prompt-ids: no ids given"},
             {"--prompt-ids 1,,2", "element 2 of '1,,2' is empty"},
             {"--prompt-ids 1,2,", "element 3 of '1,2,' is empty"},
             {"--prompt-ids 1,x", "--prompt-ids element 2: 'x' is not a whole number"},
             {"--prompt-ids 1,99999999999", "'99999999999' is out of range"},
             {"--prompt-ids 1 --seed -1", "--seed: '-1' is not a whole number"},
             {"--prompt-ids 1 --seed 18446744073709551616",
              "--seed: '18446744073709551616' is out of range"},
             {"--prompt-ids 1 --seed 12abc", "'12abc' is not a whole number"}}) {
      INFO(c.args);
      auto r = run(g + c.args);
      CHECK(r.code == 2);
      CHECK_THAT(r.out, Contains(c.msg));
    }
    // The largest seed is a seed.
    auto r = run(g + "--prompt-ids 1,2 --seed 18446744073709551615 --max-new-tokens 2 --json");
    CHECK(r.code == 0);
  }
  SECTION("a tokenizer smaller than the model is refused before generating") {
    const fs::path small = servekit::test::temp_file("servekit_cli_small_vocab");
    sk::testing::write_gpt2_vocab_prefix(kVocab, small, 300);
    auto r = run("generate --model " + kTinyA + " --vocab " + small.string() +
                 " --prompt-ids 1,2 --max-new-tokens 40 --json");
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Contains((small / "vocab.json").string()) && Contains("has 300 tokens") &&
                          Contains("vocab_size is 512"));
    CHECK_THAT(r.out, !Contains("\"text\""));  // nothing was generated first
    fs::remove_all(small);
  }
  SECTION("no prompt at all") {
    auto r = run("generate --model " + kTinyA + " --vocab " + kVocab);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Contains("--prompt"));
  }
}

TEST_CASE("generate exits 0 every time it succeeds") {
  // The exit status once came from a dangling reference (model/dispatch.hpp) and was random:
  // 0 most runs, anything on others. Many runs, text and JSON output, each must say 0.
  for (int i = 0; i < 25; i++) {
    auto r = run("generate --model " + kTinyA + " --vocab " + kVocab + " --prompt-ids 5,6,7" +
                 " --max-new-tokens 3" + (i % 2 ? " --json" : "") + " --seed " + std::to_string(i));
    INFO("run " << i << ": " << r.out);
    REQUIRE(r.code == 0);
  }
}

TEST_CASE("batch: a file of requests through each scheduler, a bad line reported by number") {
  auto ref = servekit::test::load_reference(kTinyA);
  const fs::path in = servekit::test::temp_file("servekit_cli_batch.jsonl");
  const fs::path out = servekit::test::temp_file("servekit_cli_batch_out.jsonl");
  {
    std::ofstream f(in);
    for (std::size_t i = 0; i < 4; i++) {
      const auto& c = ref.cases.at(i);
      f << json{{"prompt_ids", c.prompt_ids}, {"max_new_tokens", c.greedy_ids.size()}}.dump()
        << "\n";
      if (i == 1) f << "{\"prompt_ids\": [1, 2], \"max_new_tokens\": \"ten\"}\n";
      if (i == 2) f << "{not json\n\n";
    }
    f << json{{"prompt_ids", {3, 4}}, {"max_new_tokens", 4}, {"tempreature", 1}}.dump() << "\n";
    f << json{{"prompt_ids", {3, 4}},
              {"max_new_tokens", 5},
              {"temperature", 0.7},
              {"seed", 9},
              {"top_k", 20}}
             .dump()
      << "\n";
  }
  for (std::string sched : {"continuous", "static", "sequential"}) {
    INFO(sched);
    auto r = run("batch --model " + kTinyA + " --vocab " + kVocab + " --input " + in.string() +
                 " --output " + out.string() + " --scheduler " + sched + " --max-batch 3");
    INFO(r.out);
    CHECK(r.code == 1);  // three bad lines
    CHECK_THAT(r.out, Contains("8 requests (3 malformed)"));
    std::ifstream f(out);
    std::vector<json> got;
    std::string line;
    while (std::getline(f, line)) got.push_back(json::parse(line));
    REQUIRE(got.size() == 8);
    int ok = 0;
    for (std::size_t i = 0, c = 0; i < got.size(); i++) {
      const auto& j = got[i];
      if (j["finish_reason"] == "error") continue;
      if (c < 4) {
        CHECK(j["generated_ids"].get<std::vector<int32_t>>() == ref.cases.at(c).greedy_ids);
        c++;
      }
      ok++;
    }
    CHECK(ok == 5);
    CHECK(got[2]["line"] == 3);
    CHECK_THAT(got[2]["error"].get<std::string>(),
               Contains("line 3") && Contains("max_new_tokens") && Contains("wrong type"));
    CHECK_THAT(got[4]["error"].get<std::string>(), Contains("line 5: not valid JSON"));
    CHECK_THAT(got[6]["error"].get<std::string>(), Contains("unknown field \"tempreature\""));
    CHECK(got[7]["generated_ids"].size() == 5);
  }
  auto r = run("batch --model " + kTinyA + " --vocab " + kVocab + " --input /nonexistent.jsonl");
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Contains("/nonexistent.jsonl"));
}

TEST_CASE("batch: prompt_logprobs scores prompts; a shared start scores the same in each") {
  const std::vector<int32_t> ids{46, 206, 75, 218, 12, 99};
  const auto got = run_batch(
      "servekit_cli_prompt_logprobs",
      {R"({"prompt_ids": [46, 206, 75, 218], "max_new_tokens": 0, "prompt_logprobs": 1})",
       R"({"prompt_ids": [46, 206, 75, 218, 12, 99], "max_new_tokens": 2, "prompt_logprobs": 0})",
       R"({"prompt_ids": [46, 206], "prompt_logprobs": -1})",
       R"({"prompt_ids": [46, 206], "max_new_tokens": 2})"});
  REQUIRE(got.size() == 4);
  const json &a = got[0]["prompt_logprobs"], &b = got[1]["prompt_logprobs"];
  REQUIRE(a.size() == 4);
  REQUIRE(b.size() == 6);
  CHECK(a[0].is_null());
  CHECK(b[0].is_null());
  for (std::size_t i = 1; i < b.size(); i++) {
    INFO("prompt position " << i);
    CHECK(b[i]["id"] == ids[i]);
    CHECK(b[i]["logprob"].get<float>() <= 0.f);
    CHECK(b[i]["top"].empty());
    if (i >= a.size()) continue;
    CHECK(a[i]["logprob"] == b[i]["logprob"]);  // the same bits, printed the same
    REQUIRE(a[i]["top"].size() == 1);
    CHECK(a[i]["top"][0]["logprob"].get<float>() >= a[i]["logprob"].get<float>());
  }
  CHECK(got[0]["finish_reason"] == "length");
  CHECK(got[0]["generated_ids"].empty());
  CHECK(got[1]["generated_ids"].size() == 2);
  CHECK(got[2]["finish_reason"] == "error");
  CHECK_THAT(got[2]["error"].get<std::string>(),
             Contains("line 3") && Contains("prompt_logprobs") && Contains("must be >= 0"));
  CHECK_FALSE(got[3].contains("prompt_logprobs"));
}

TEST_CASE("batch --scheduling-policy priority: lower numbers first, the same tokens") {
  const std::vector<std::string> lines = {
      R"({"prompt_ids": [46, 206, 75], "max_new_tokens": 6, "priority": 2})",
      R"({"prompt_ids": [12, 99], "max_new_tokens": 6, "priority": 0})",
      R"({"prompt_ids": [218, 12, 5, 7], "max_new_tokens": 6, "priority": -1})",
      R"({"prompt_ids": [46, 206], "priority": "high"})",
      R"({"prompt_ids": [46, 206], "priority": 1.5})"};
  // One at a time: a request scheduled later waited longer, whenever it was submitted, since
  // each waited for the whole of those before it.
  const auto got = run_batch("servekit_cli_priority", lines,
                             " --scheduling-policy priority --scheduler sequential --max-batch 1");
  const auto fcfs = run_batch("servekit_cli_priority_fcfs", lines, " --max-batch 1");
  REQUIRE(got.size() == 5);
  REQUIRE(fcfs.size() == 5);
  for (int i = 0; i < 3; i++) {
    INFO("line " << i + 1);
    REQUIRE(got[i]["finish_reason"] == "length");
    CHECK(got[i]["generated_ids"].size() == 6);
    CHECK(fcfs[i]["finish_reason"] == (i == 1 ? "length" : "error"));  // fcfs: priority 0 only
  }
  auto queued = [&](int i) { return got[i]["metrics"]["queue_ms"].get<double>(); };
  CHECK(queued(2) < queued(1));
  CHECK(queued(1) < queued(0));
  CHECK(fcfs[1]["generated_ids"] == got[1]["generated_ids"]);
  CHECK_THAT(fcfs[0]["error"].get<std::string>(),
             Contains("priority 2 asked for") && Contains("--scheduling-policy priority"));
  for (int i : {3, 4}) {
    CHECK(got[i]["finish_reason"] == "error");
    CHECK_THAT(got[i]["error"].get<std::string>(), Contains("line " + std::to_string(i + 1)) &&
                                                       Contains("\"priority\" must be an integer"));
  }
}

TEST_CASE("the model folder's own tokenizer files win, and an incomplete pair is an error") {
  const fs::path dir = servekit::test::temp_file("servekit_cli_model_tok");
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"})
    fs::create_symlink(fs::absolute(fs::path(kTinyA) / f), dir / f);
  std::ofstream(dir / "merges.txt") << "#version: 0.2\n";  // no vocab.json beside it
  auto r = run("generate --model " + dir.string() + " --prompt-ids 1,2 --max-new-tokens 2");
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Contains(dir.string()) && Contains("found merges.txt"));
  // OpenAI's file names in the folder are used too.
  fs::remove(dir / "merges.txt");
  for (const char* f : {"encoder.json", "vocab.bpe"})
    fs::create_symlink(fs::path(kVocab) / f, dir / f);
  r = run("generate --model " + dir.string() + " --prompt-ids 1,2 --max-new-tokens 2 --json");
  INFO(r.out);
  CHECK(r.code == 0);
}

TEST_CASE("the GPT-2 vocabulary ships with servekit; SERVEKIT_VOCAB overrides it") {
  const auto canon = [](const std::string& p) { return fs::weakly_canonical(p).string(); };
  // The build tree's program reads the source tree's data/gpt2 (an installed one its own
  // share/servekit/gpt2: tests/package.cmake, cli_installed).
  auto r = run("--version");
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Contains("vocabulary: " + canon(kVocab)));
  const std::string hello = "{\"text\": \"Hello world\"}\n";
  r = run("tokenize", hello);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Contains("[15496,995]"));
  // Another vocabulary by environment: the 512-token one gives other ids.
  const std::string tiny = std::string(SERVEKIT_FIXTURES) + "/tiny-vocab";
  r = run_env("SERVEKIT_VOCAB=" + tiny, "--version");
  CHECK_THAT(r.out, Contains("vocabulary: " + tiny));
  r = run_env("SERVEKIT_VOCAB=" + tiny, "tokenize", hello);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Contains("\"ids\""));
  CHECK_THAT(r.out, !Contains("[15496,995]"));
  // A wrong SERVEKIT_VOCAB is an error naming it, not a fall back to another vocabulary.
  r = run_env("SERVEKIT_VOCAB=/nonexistent/vocab", "tokenize", hello);
  CHECK(r.code != 0);
  CHECK_THAT(r.out, Contains("SERVEKIT_VOCAB=/nonexistent/vocab: no vocabulary there"));
  // --vocab wins over the environment.
  r = run_env("SERVEKIT_VOCAB=/nonexistent/vocab", "tokenize --vocab " + kVocab, hello);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Contains("[15496,995]"));
}

TEST_CASE("generate behaves like the tools people know") {
  const std::string base = "generate --model " + kTinyA + " --vocab " + kVocab;
  SECTION("--version") {
    auto r = run("--version");
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Contains("servekit 0."));
  }
  SECTION("a positional prompt and -n") {
    // tiny-a's vocabulary is 512 ids; text needs the random GPT-2 124M (no --model).
    auto r = run("generate \"Hello there\" -n 3 --ignore-eos");
    INFO(r.out);
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Contains("\nHello there"));
    CHECK_THAT(r.out, Contains("3 new tokens"));
    auto both = run(base + " \"Hello\" --prompt Hi");
    CHECK(both.code != 0);
    CHECK_THAT(both.out, Contains("excludes"));
  }
  SECTION("a line says which model is loading, and how long it took") {
    auto r = run(base + " --prompt-ids 1,2 -n 1");
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Contains("servekit: loading " + kTinyA + " (tiny-a) ... "));
  }
  SECTION("--temperature 0 is greedy, as in HF and vLLM") {
    auto g = run(base + " --prompt-ids 1,2,3 -n 6 --ignore-eos --json --greedy");
    auto t0 = run(base + " --prompt-ids 1,2,3 -n 6 --ignore-eos --json --temperature 0");
    REQUIRE(g.code == 0);
    REQUIRE(t0.code == 0);
    CHECK(json::parse(g.out)["generated_ids"] == json::parse(t0.out)["generated_ids"]);
  }
  SECTION("a mistyped flag gets the nearest known one") {
    auto r = run(base + " --promt Hello");
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Contains("unknown option '--promt' (did you mean --prompt?)"));
    auto far = run(base + " --prompt Hello --zzzzzz");
    CHECK(far.code == 2);
    CHECK_THAT(far.out, Contains("unknown option '--zzzzzz' (see --help)"));
    auto words = run(base + " Hello World");
    CHECK(words.code == 2);
    CHECK_THAT(words.out, Contains("unexpected argument 'World' (quote a prompt"));
  }
  SECTION("an error after the echoed prompt starts its own line") {
    std::string longp;
    for (int i = 0; i < 1100; i++) longp += " hello";  // 1100 tokens; GPT-2 has 1024 positions
    auto r = run("generate --prompt \"" + longp + "\" -n 2");
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Contains("hello hello\nservekit: error: ") && Contains("1024"));
  }
  SECTION("--top-logprobs without --json prints them after the text") {
    auto r = run(base + " --prompt-ids 1,2,3 -n 4 --ignore-eos --top-logprobs 2");
    INFO(r.out);
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Contains("top logprobs:\n  0 "));
    CHECK_THAT(r.out, Contains("\n  3 "));
  }
  SECTION("the JSON echoes the prompt text decoded from --prompt-ids") {
    auto r = run(base + " --prompt-ids 464,318,257 -n 1 --json");
    REQUIRE(r.code == 0);
    const std::string text = json::parse(r.out)["prompt"];
    CHECK_FALSE(text.empty());
    auto back = run("tokenize --vocab " + kVocab, json{{"text", text}}.dump() + "\n");
    CHECK(json::parse(back.out)["ids"] == json::array({464, 318, 257}));
  }
}

TEST_CASE(
    "generate --json-schema and batch's json_schema give JSON that fits; bad schemas are "
    "clear errors") {
  const fs::path dir = servekit::test::temp_file("servekit_cli_schema");
  fs::create_directories(dir);
  const fs::path person = dir / "person.json", bad = dir / "bad.json";
  std::ofstream(person) << R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 10}, "age": {"type": "integer", "minimum": 0}},
      "required": ["name", "age"]})";
  std::ofstream(bad)
      << R"({"type": "object", "properties": {"d": {"type": "string", "format": "hostname"}}})";
  for (int seed = 1; seed <= 3; seed++) {
    auto r = run("generate --model " + kTinyA + " --vocab " + kTinyVocab + " --json -n 40 --seed " +
                 std::to_string(seed) + " --temperature 1 --json-schema " + person.string() +
                 " 'Alice is 30'");
    INFO(r.out);
    REQUIRE(r.code == 0);
    const json out = json::parse(r.out);
    CHECK(out["finish_reason"] == "eos");
    const json p = json::parse(out["text"].get<std::string>());
    CHECK(p["name"].get<std::string>().size() <= 40);  // 10 characters, up to 4 bytes each
    CHECK(p["age"].get<int64_t>() >= 0);
  }
  auto e = run("generate --model " + kTinyA + " --vocab " + kTinyVocab + " --json-schema " +
               bad.string() + " hi");
  CHECK(e.code != 0);
  CHECK_THAT(e.out, Contains(bad.string()) && Contains("at /properties/d") &&
                        Contains("format \"hostname\" is not supported"));
  const auto got = run_batch(
      "servekit_cli_schema_batch",
      {R"({"prompt": "Tags:", "max_new_tokens": 30, "temperature": 1, "seed": 4,)"
       R"( "json_schema": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}})",
       R"({"prompt": "x", "json_schema": {"type": "objekt"}})"});
  REQUIRE(got.size() == 2);
  const json tags = json::parse(got[0]["text"].get<std::string>());
  CHECK(tags.is_array());
  CHECK(tags.size() <= 3);
  for (const auto& t : tags) CHECK((t == "a" || t == "b"));
  CHECK_THAT(got[1]["error"].get<std::string>(),
             Contains("line 2: field \"json_schema\"") && Contains("unsupported type \"objekt\""));
}

TEST_CASE("batch: jump-forward by default, --no-jump-forward a step each, the same lines") {
  const std::vector<std::string> lines = {
      R"({"prompt": "Who?", "max_new_tokens": 40, "temperature": 1, "seed": 3, "json_schema":)"
      R"( {"type": "object", "properties": {"colour": {"enum": ["dark red", "dark blue"]}},)"
      R"( "required": ["colour"], "additionalProperties": false}})",
      R"({"prompt": "Free", "max_new_tokens": 8, "seed": 4})"};
  std::string on_log, off_log;
  const auto on = run_batch("servekit_cli_jump_on", lines, "", &on_log);
  const auto off = run_batch("servekit_cli_jump_off", lines, " --no-jump-forward", &off_log);
  REQUIRE(on.size() == 2);
  REQUIRE(off.size() == 2);
  for (int i = 0; i < 2; i++) {
    CHECK(on[i]["text"] == off[i]["text"]);
    CHECK(on[i]["generated_ids"] == off[i]["generated_ids"]);
    CHECK_FALSE(off[i].contains("forced_tokens"));
  }
  CHECK(on[0]["forced_tokens"].get<int>() >= 2);  // `{"colour` and `d"}` or `e"}`
  CHECK(json::parse(on[0]["text"].get<std::string>())["colour"].get<std::string>().rfind("dark ",
                                                                                         0) == 0);
  CHECK_THAT(on_log, Contains("jump-forward:"));
  CHECK_THAT(off_log, !Contains("jump-forward:"));
}

TEST_CASE("generate --regex and --choice, and batch's regex and choice, constrain the whole text") {
  const std::string gen = "generate --model " + kTinyA + " --vocab " + kTinyVocab +
                          " --json -n 24 --temperature 1 --seed ";
  const std::regex phone("[0-9]{3}-[0-9]{4}");
  for (int seed = 1; seed <= 3; seed++) {
    auto r = run(gen + std::to_string(seed) + " --regex '[0-9]{3}-[0-9]{4}' 'Call me at'");
    INFO(r.out);
    REQUIRE(r.code == 0);
    const json out = json::parse(r.out);
    CHECK(out["finish_reason"] == "eos");
    CHECK(std::regex_match(out["text"].get<std::string>(), phone));
    auto c =
        run(gen + std::to_string(seed) + " --choice yes --choice no --choice 'not sure' 'Ok?'");
    INFO(c.out);
    REQUIRE(c.code == 0);
    const std::string t = json::parse(c.out)["text"].get<std::string>();
    CHECK((t == "yes" || t == "no" || t == "not sure"));
  }
  auto bad = run(gen + "1 --regex 'a(b' hi");
  CHECK(bad.code != 0);
  CHECK_THAT(bad.out, Contains("--regex") && Contains("unterminated group"));
  auto both = run(gen + "1 --regex a --choice b hi");
  CHECK(both.code != 0);
  CHECK_THAT(both.out, Contains("excludes"));
  const auto got =
      run_batch("servekit_cli_regex",
                {R"({"prompt": "Id:", "temperature": 1, "seed": 2, "regex": "[A-Z]{2}[0-9]{2}"})",
                 R"({"prompt": "Pick:", "temperature": 1, "seed": 3, "choice": ["red", "blue"]})",
                 R"j({"prompt": "x", "regex": "(?=a)"})j",
                 R"j({"prompt": "x", "regex": "a", "choice": ["a"]})j"});
  REQUIRE(got.size() == 4);
  CHECK(std::regex_match(got[0]["text"].get<std::string>(), std::regex("[A-Z]{2}[0-9]{2}")));
  CHECK((got[1]["text"] == "red" || got[1]["text"] == "blue"));
  CHECK_THAT(got[2]["error"].get<std::string>(),
             Contains("line 3: field \"regex\"") && Contains("lookaround"));
  CHECK_THAT(got[3]["error"].get<std::string>(), Contains("one of the fields json_schema"));
}

TEST_CASE("generate --grammar and batch's grammar: a GBNF grammar's texts; bad ones named") {
  const fs::path dir = servekit::test::temp_file("servekit_cli_gbnf");
  fs::create_directories(dir);
  const fs::path sum = dir / "sum.gbnf", bad = dir / "bad.gbnf";
  std::ofstream(sum)
      << "# sums of small numbers\nroot ::= num (\" + \" num)*\nnum ::= [1-9] [0-9]?\n";
  std::ofstream(bad) << "root ::= num\nnum ::= num \"1\" | \"1\"\n";
  const std::regex want("[1-9][0-9]?( \\+ [1-9][0-9]?)*");
  const std::string gen = "generate --model " + kTinyA + " --vocab " + kTinyVocab +
                          " --json -n 16 --temperature 1 --seed ";
  for (int seed = 1; seed <= 3; seed++) {
    auto r = run(gen + std::to_string(seed) + " --grammar " + sum.string() + " 'Add:'");
    INFO(r.out);
    REQUIRE(r.code == 0);
    CHECK(std::regex_match(json::parse(r.out)["text"].get<std::string>(), want));
  }
  auto e = run(gen + "1 --grammar " + bad.string() + " hi");
  CHECK(e.code != 0);
  CHECK_THAT(e.out, Contains(bad.string()) && Contains("left recursion") && Contains("num"));
  auto missing = run(gen + "1 --grammar " + (dir / "none.gbnf").string() + " hi");
  CHECK(missing.code != 0);
  CHECK_THAT(missing.out, Contains("none.gbnf"));
  const auto got =
      run_batch("servekit_cli_gbnf_batch",
                {R"({"prompt": "Add:", "temperature": 1, "seed": 2, "max_new_tokens": 12,)"
                 R"( "grammar": "root ::= [1-9] [0-9]? (\" + \" [1-9] [0-9]?)*"})",
                 R"({"prompt": "x", "grammar": "root ::= \"a\" x"})"});
  REQUIRE(got.size() == 2);
  CHECK(std::regex_match(got[0]["text"].get<std::string>(), want));
  CHECK_THAT(got[1]["error"].get<std::string>(),
             Contains("line 2: field \"grammar\"") && Contains("rule \"x\" is used but never"));
}

// The CSV `servekit bench` writes: one row per (composition, batch) after the header.
static std::vector<std::vector<std::string>> read_csv(const fs::path& p) {
  std::ifstream f(p);
  std::vector<std::vector<std::string>> rows;
  std::string line;
  while (std::getline(f, line)) {
    rows.emplace_back();
    std::size_t start = 0;
    for (std::size_t comma; (comma = line.find(',', start)) != std::string::npos; start = comma + 1)
      rows.back().push_back(line.substr(start, comma - start));
    rows.back().push_back(line.substr(start));
  }
  return rows;
}

TEST_CASE(
    "bench compares compositions on one batch and schedulers on arrivals; bad flags are "
    "clear errors") {
  const fs::path dir = servekit::test::temp_file("servekit_cli_bench");
  fs::create_directories(dir);
  const std::string base = "bench --model " + kTinyA + " --vocab " + kVocab +
                           " --prompt 12 --new 6 --rounds 1 --out " + (dir / "b").string();
  // One batch at once, two LoRA dispatches (no adapters) at two batch sizes: compositions
  // every build of the CLI has, the sanitizer's too.
  auto r = run(base + " --compare lora=none,gathered --batch 1,2");
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("12-token prompts, 6 new tokens"));
  auto rows = read_csv(dir / "b.csv");
  REQUIRE(rows.size() == 5);
  CHECK(rows[0][0] == "composition");
  for (std::size_t i = 1; i < rows.size(); i++) {
    REQUIRE(rows[i].size() == 10);
    CHECK_THAT(rows[i][0], Contains(i <= 2 ? "/none/" : "/lora-gathered/"));
    CHECK(rows[i][1] == (i % 2 == 1 ? "1" : "2"));
    CHECK(std::stod(rows[i][2]) > 0);  // prefill tokens/s
    CHECK(std::stod(rows[i][3]) > 0);  // decode tokens/s
  }
  // Arrivals: every scheduler on the same requests of mixed lengths.
  r = run(base +
          " --compare scheduler=continuous,static,sequential --rate 400 --requests 6 "
          "--batch 3");
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("6 requests arriving at 400/s (Poisson), prompts of 3..12 tokens"));
  rows = read_csv(dir / "b.csv");
  REQUIRE(rows.size() == 4);
  const char* scheds[] = {"continuous", "static", "sequential"};
  for (int i = 1; i <= 3; i++) {
    CHECK_THAT(rows[i][0], Contains(std::string("/") + scheds[i - 1] + "/"));
    CHECK(rows[i][1] == "3");
    for (int c = 2; c <= 5; c++) CHECK(std::stod(rows[i][c]) > 0);  // throughputs, TTFT p50/p99
  }
  // Bad flags name what is wrong.
  auto e = run(base + " --compare scheduler=fifo");
  CHECK(e.code != 0);
  CHECK_THAT(e.out, Contains("scheduler") && Contains("fifo"));
  e = run(base + " --rate -1");
  CHECK(e.code != 0);
  CHECK_THAT(e.out, Contains("--rate"));
  e = run(base + " --compare sched=static");
  CHECK(e.code != 0);
  CHECK_THAT(e.out, Contains("unknown axis 'sched'"));
  fs::remove_all(dir);
}

// The same generated ids and logprobs, bit for bit, in two `generate --json` outputs.
static void check_same_tokens(const json& want, const json& got) {
  CHECK(got["generated_ids"] == want["generated_ids"]);
  REQUIRE(got["tokens"].size() == want["tokens"].size());
  for (std::size_t i = 0; i < want["tokens"].size(); i++)
    CHECK(got["tokens"][i]["logprob"].get<double>() == want["tokens"][i]["logprob"].get<double>());
}

TEST_CASE(
    "generate --speculative: the tokens and logprobs of plain generate, greedy, seeded and "
    "with an adapter; the proposals counted") {
  // A motif repeated: the prompt's own n-grams give proposals from the first step.
  const std::string base = "generate --model " + kTinyA + " --vocab " + kVocab +
                           " --json -n 24 --top-logprobs 1 --prompt-ids 5,9,2,7,5,9,2,7,5,9,2,7";
  // rule "always", so that proposals are made on every run (the default rule reads step times).
  const std::string kAlways =
      " --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
      "\"prompt_lookup_max\": 3, \"rule\": \"always\"}'";
  for (const std::string& opts :
       {std::string(" --greedy"), std::string(" --temperature 1 --seed 7"),
        " --greedy --adapter " + kTinyA + "/lora/r16"}) {
    INFO(opts);
    auto plain = run(base + opts), spec = run(base + opts + kAlways);
    INFO(plain.out << "\n" << spec.out);
    REQUIRE(plain.code == 0);
    REQUIRE(spec.code == 0);
    const json p = json::parse(plain.out), s = json::parse(spec.out);
    check_same_tokens(p, s);
    CHECK(s["speculative"]["proposed"].get<int>() > 0);
    CHECK(s["speculative"]["accepted"].get<int>() <= s["speculative"]["proposed"].get<int>());
    CHECK_FALSE(p.contains("speculative"));
    // The short form and the default rule: the same tokens and logprobs, whatever it proposed.
    auto cost = run(base + opts + " --speculative ngram:3,4");
    REQUIRE(cost.code == 0);
    check_same_tokens(p, json::parse(cost.out));
  }
  auto e = run(base + " --speculative ngram --no-cache");
  CHECK(e.code != 0);
  CHECK_THAT(e.out, Contains("--speculative") && Contains("--no-cache"));
  e = run(base + " --speculative ngram:0,4");
  CHECK(e.code != 0);
  CHECK_THAT(e.out, Contains("--speculative"));
}

TEST_CASE("generate --speculative draft: a draft model's proposals, plain tokens") {
  const std::string base = "generate --model " + kTinyA + " --vocab " + kVocab +
                           " --json -n 24 --top-logprobs 1 --prompt-ids 5,9,2,7,11,3";
  // The target drafting for itself: greedy, every proposal is what it draws.
  const std::string twin = " --speculative-config '{\"method\": \"draft_model\", \"model\": \"" +
                           kTinyA + "\", \"num_speculative_tokens\": 4, \"rule\": \"always\"}'";
  for (const std::string& opts :
       {std::string(" --greedy"), std::string(" --temperature 1 --seed 3")}) {
    INFO(opts);
    auto plain = run(base + opts), spec = run(base + opts + twin);
    INFO(plain.out << "\n" << spec.out);
    REQUIRE(plain.code == 0);
    REQUIRE(spec.code == 0);
    const json p = json::parse(plain.out), s = json::parse(spec.out);
    check_same_tokens(p, s);
    CHECK(s["speculative"]["proposed"].get<int>() > 0);
    if (opts == " --greedy") CHECK(s["speculative"]["accepted"] == s["speculative"]["proposed"]);
    auto short_form = run(base + opts + " --speculative draft:" + kTinyA + ":3");
    REQUIRE(short_form.code == 0);
    check_same_tokens(p, json::parse(short_form.out));
  }
  auto e = run(base + " --speculative draft:" + kTinyA + "/no-such-folder");
  CHECK(e.code != 0);
  CHECK_THAT(e.out, Contains("--speculative draft " + kTinyA + "/no-such-folder") &&
                        Contains("config.json"));
  e = run(base + " --speculative-config '{\"method\": \"draft_model\"}'");
  CHECK(e.code != 0);
  CHECK_THAT(e.out, Contains("needs \"model\""));
  e = run(base + " --speculative draft:");
  CHECK(e.code != 0);
  CHECK_THAT(e.out, Contains("should be draft:DIR or draft:DIR:K"));
}
