// SPDX-License-Identifier: Apache-2.0
// The CLI's composition flags route to the composition they name: for each composition the CLI
// is compiled with (serve/compiled.hpp, read from the CLI's own generated list), `generate`
// gives the tokens and logprobs of the library's own generate() on that composition, and
// `batch` the tokens of the library's engine with its scheduler, on the tiny fixture. Bad
// choices are clear errors.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "servekit/lora/adapter.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/compiled.hpp"
#include "servekit/serve/engine.hpp"
#include "servekit/serve/generate.hpp"
#include "servekit/text/tokenizer.hpp"
#if defined(SERVEKIT_TEST_EMULATED)
#include "servekit/backend/emulated.hpp"
#endif
#include "support/reference.hpp"
#include "support/run_cli.hpp"

namespace fs = std::filesystem;
namespace sk = servekit;
using json = nlohmann::json;
using Catch::Contains;
using sk::test::join;
using sk::test::run;

namespace {

const std::string kVocab = std::string(SERVEKIT_DATA) + "/gpt2";
const std::string kTinyA = std::string(SERVEKIT_FIXTURES) + "/tiny-a";
const std::string kAdapter = kTinyA + "/lora/r16";
using D = sk::dims::TinyA;

// The flags that name composition C (its own policy names, as --version lists them).
template <class C>
std::string flags() {
  return " --weights " + std::string(C::Weights::name) + " --kv " + std::string(C::Kv::name) +
         " --lora " + std::string(C::Lora::name) + " --backend " + std::string(C::Backend::name);
}

template <class C>
void check_composition() {
  constexpr bool kLora = sk::lora::enabled<typename C::Lora>;
  const auto ref = sk::test::load_reference(kTinyA);
  const auto& c = ref.cases.at(2);
  const int n = static_cast<int>(c.greedy_ids.size());
  const std::string adapter = kLora ? " --adapter " + kAdapter : "";
  auto r = run("generate --model " + kTinyA + " --vocab " + kVocab + " --prompt-ids " +
               join(c.prompt_ids) + " --max-new-tokens " + std::to_string(n) +
               " --ignore-eos --json --top-logprobs 2" + flags<C>() + adapter);
  INFO(r.out);
  if constexpr (std::is_same_v<typename C::Backend, sk::backend::Cuda>) {
    // No GPU here: a clear error naming the device problem, never a CUDA abort.
    if (r.code != 0) {
      CHECK(r.code == 2);
      CHECK_THAT(r.out, Contains("--backend cuda: no usable CUDA device"));
    } else {
      CHECK(json::parse(r.out)["generated_ids"].size() == c.greedy_ids.size());
    }
  } else {
    REQUIRE(r.code == 0);
    const json j = json::parse(r.out);
    CHECK(j["config"] == sk::Config<D, typename C::Weights, typename C::Kv, typename C::Lora,
                                    typename C::Backend>::name());

    // The library's own run of the same composition.
    using Model = sk::Gpt2<typename C::template Config<D>>;
    Model model(sk::model::load_gpt2<D>(kTinyA));
    int slot = -1;
    if constexpr (kLora) slot = model.add_adapter(sk::lora::load_adapter<D>(kAdapter));
    const auto tok = sk::text::Gpt2Tokenizer::from_dir(kVocab);
    sk::serve::GenerateOptions opt;
    opt.sampling.temperature = 0;
    opt.stop.max_new_tokens = n;
    opt.stop.stop_at_eos = false;
    opt.top_logprobs = 2;
    opt.adapter = slot;
    const auto want = sk::serve::generate(model, tok, c.prompt_ids, opt);
    REQUIRE(j["tokens"].size() == want.tokens.size());
    for (std::size_t i = 0; i < want.tokens.size(); i++) {
      CHECK(j["tokens"][i]["id"] == want.tokens[i].id);
      CHECK(j["tokens"][i]["logprob"].get<float>() == want.tokens[i].logprob);
      CHECK(j["tokens"][i]["top_logprobs"][1]["id"] == want.tokens[i].top[1].id);
    }

    // batch: the engine with C's scheduler, three requests at once.
    const fs::path in = servekit::test::temp_file("servekit_cli_compositions.jsonl");
    const fs::path out = servekit::test::temp_file("servekit_cli_compositions_out.jsonl");
    std::vector<sk::serve::Request> reqs;
    {
      std::ofstream f(in);
      for (int i = 0; i < 3; i++) {
        const auto& rc = ref.cases.at(i);
        json line = {{"prompt_ids", rc.prompt_ids}, {"max_new_tokens", 6}, {"ignore_eos", true}};
        sk::serve::Request q;
        q.prompt_ids = rc.prompt_ids;
        q.stop.max_new_tokens = 6;
        q.stop.stop_at_eos = false;
        if (kLora && i != 1) line["adapter"] = "r16", q.adapter = "r16";
        f << line.dump() << "\n";
        reqs.push_back(std::move(q));
      }
    }
    auto b = run("batch --model " + kTinyA + " --vocab " + kVocab + " --input " + in.string() +
                 " --output " + out.string() + " --max-batch 3 --scheduler " +
                 std::string(C::Scheduler::name) + flags<C>() + adapter);
    INFO(b.out);
    REQUIRE(b.code == 0);
    Model fresh(sk::model::load_gpt2<D>(kTinyA));
    sk::serve::Engine<Model, typename C::Scheduler> engine(fresh, tok, {.max_batch = 3});
    if constexpr (kLora) engine.adapters().add("r16", kAdapter);
    const auto results = engine.run_all(std::move(reqs));
    std::ifstream got(out);
    std::string line;
    for (const auto& res : results) {
      REQUIRE(std::getline(got, line));
      CHECK(json::parse(line)["generated_ids"].get<std::vector<int32_t>>() == res.ids());
    }
  }
}

}  // namespace

TEST_CASE("every compiled composition, run from the CLI, equals the library's run of it") {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (([&] {
       using C = sk::serve::CompiledAt<I>;
       DYNAMIC_SECTION(C::name()) {
         check_composition<C>();
       }
     }()),
     ...);
  }
  (std::make_index_sequence<sk::serve::kCompiledCount>{});
}

TEST_CASE("composition flags: unknown, uncompiled and refused choices are clear errors") {
  const std::string gen = "generate --model " + kTinyA + " --vocab " + kVocab + " --prompt-ids 1,2";
  struct Case {
    std::string args, says;
  };
  const Case cases[] = {
      {gen + " --weights f8", "--weights f8: accepted: f32, f16, bf16, u8"},
      {gen + " --kv paged0", "--kv paged0: accepted: contiguous, pagedN"},
      {gen + " --lora fancy", "--lora fancy: accepted: none, loop, gathered, segmented"},
      {gen + " --backend tpu", "--backend tpu: accepted: host, emulated, cuda"},
      {gen + " --weights u8-group48 --kv paged8", "is not compiled into this build. Compiled:"},
      {gen + " --weights u8-group48", "-DSERVEKIT_COMPOSITIONS="},
      {gen + " --weights w8a8-group48", "w8a8-group48/contiguous/none/continuous/host is not"},
      {gen + " --weights w8a8 --kv paged16-i8 --backend emulated",
       "w8a8-channel/paged16-i8/none/continuous/emulated is not compiled into this build"},
      {gen + " --dtype float16 --weights bf16", "--dtype f16 disagrees with --weights bf16"},
      {gen + " --dtype int4", "--dtype int4: accepted: auto, float32, float16"},
      {gen + " --kv contiguous --kv-block 32", "a contiguous cache has no blocks"},
      {gen + " --kv paged16 --block-size 32", "--kv-block 32 disagrees with --kv paged16"},
      {gen + " --kv-cache-dtype fp8",
       "--kv-cache-dtype fp8: accepted: auto, float32, float16, int8"},
      {gen + " --kv paged16-i8 --kv-cache-dtype float16", "disagrees with --kv paged16-i8"},
      {gen + " --lora merge", "--lora merge needs --adapter"},
      {gen + " --adapter " + kAdapter + " --lora none", "--adapter needs a LoRA dispatch"},
      {"batch --model " + kTinyA + " --vocab " + kVocab + " --input /dev/null --lora merge" +
           " --adapter " + kAdapter + " --adapter " + kTinyA + "/lora/r4",
       "--lora merge folds one adapter into the weights; 2 --adapter given"},
      {"batch --model " + kTinyA + " --vocab " + kVocab + " --input /dev/null --scheduler fifo",
       "--scheduler fifo: accepted: continuous, static, sequential"},
  };
  for (const auto& c : cases) {
    INFO(c.args);
    auto r = run(c.args);
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Contains(c.says));
  }
}

TEST_CASE("servekit --version lists the compiled compositions") {
  auto r = run("--version");
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains(std::to_string(sk::serve::kCompiledCount) + " compiled"));
  for (const sk::serve::Spec& s : sk::serve::kCompiledSpecs)
    CHECK_THAT(r.out, Contains(sk::serve::spec_name(s)));
}

// Prefix caching from the command line (on by default on a paged cache).
TEST_CASE("batch on a paged cache: prompts that share a prefix reuse it, the same tokens off") {
  const fs::path in = servekit::test::temp_file("servekit_cli_prefix.jsonl");
  {
    std::ofstream f(in);
    std::vector<int32_t> common(40);
    for (int i = 0; i < 40; i++) common[i] = (i * 37 + 11) % 500;
    for (int i = 0; i < 4; i++) {
      auto p = common;
      p.push_back(i + 1);
      f << json{{"prompt_ids", p}, {"max_new_tokens", 4}, {"temperature", 0}}.dump() << "\n";
    }
  }
  auto lines = [](const fs::path& p) {
    std::ifstream f(p);
    std::vector<json> got;
    for (std::string line; std::getline(f, line);) got.push_back(json::parse(line));
    return got;
  };
  const std::string base = "batch --model " + kTinyA + " --vocab " + kVocab + " --input " +
                           in.string() + " --kv paged16 --lora gathered --max-batch 1";
  const fs::path on_out = servekit::test::temp_file("servekit_cli_prefix_on.jsonl");
  const fs::path off_out = servekit::test::temp_file("servekit_cli_prefix_off.jsonl");
  auto on = run(base + " --output " + on_out.string());
  INFO(on.out);
  REQUIRE(on.code == 0);
  // One request at a time: the first computes 2 full blocks, the next three find them.
  CHECK_THAT(on.out, Contains("prefix cache: 96 of 164 prompt tokens found cached (58.5%)"));
  auto off = run(base + " --no-prefix-caching --output " + off_out.string());
  REQUIRE(off.code == 0);
  CHECK_THAT(off.out, !Contains("prefix cache:"));
  const auto a = lines(on_out), b = lines(off_out);
  REQUIRE(a.size() == 4);
  REQUIRE(b.size() == 4);
  for (int i = 0; i < 4; i++) {
    CHECK(a[i]["cached_tokens"] == (i == 0 ? 0 : 32));
    CHECK(b[i]["cached_tokens"] == 0);
    CHECK(a[i]["generated_ids"] == b[i]["generated_ids"]);
  }
  auto bad = run(base + " --prefix-cache-blocks -2");
  CHECK(bad.code != 0);  // CLI11's code for a value its check refuses
  CHECK_THAT(bad.out, Contains("--prefix-cache-blocks"));
}

TEST_CASE("batch --speculative: the same tokens, fewer steps; bad values name the flag") {
  const fs::path in = servekit::test::temp_file("servekit_cli_spec.jsonl");
  {
    std::ofstream f(in);
    for (int i = 0; i < 6; i++) {
      std::vector<int32_t> p;  // a motif repeated: prompt lookup finds it
      for (int rep = 0; rep < 4; rep++)
        for (int t = 0; t < 3 + i; t++) p.push_back((t * 53 + i * 7 + 5) % 500);
      json line = {{"prompt_ids", p}, {"max_new_tokens", 24}, {"temperature", 0}};
      if (i == 4) line["temperature"] = 0.05, line["seed"] = 9;
      if (i == 5) line["speculate"] = false;
      f << line.dump() << "\n";
    }
  }
  auto lines = [](const fs::path& p) {
    std::ifstream f(p);
    std::vector<json> got;
    for (std::string line; std::getline(f, line);) got.push_back(json::parse(line));
    return got;
  };
  const std::string base = "batch --model " + kTinyA + " --vocab " + kVocab + " --input " +
                           in.string() + " --kv paged16 --lora gathered --max-batch 4";
  const fs::path on_out = servekit::test::temp_file("servekit_cli_spec_on.jsonl");
  const fs::path off_out = servekit::test::temp_file("servekit_cli_spec_off.jsonl");
  // rule "always": every step that can speculate does, so the counts below are the same on
  // every run (the default rule, "cost", reads the machine's step times).
  const std::string always =
      " --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
      "\"prompt_lookup_max\": 3, \"rule\": \"always\"}'";
  auto on = run(base + always + " --output " + on_out.string());
  INFO(on.out);
  REQUIRE(on.code == 0);
  CHECK_THAT(on.out, Contains("batch: speculation: ") && Contains("tokens per verifying step"));
  auto off = run(base + " --output " + off_out.string());
  REQUIRE(off.code == 0);
  CHECK_THAT(off.out, !Contains("speculation:"));
  const auto a = lines(on_out), b = lines(off_out);
  REQUIRE(a.size() == 6);
  REQUIRE(b.size() == 6);
  int accepted = 0;
  for (int i = 0; i < 6; i++) {
    CHECK(a[i]["generated_ids"] == b[i]["generated_ids"]);
    CHECK_FALSE(b[i].contains("speculative"));
    if (a[i].contains("speculative")) accepted += a[i]["speculative"]["accepted"].get<int>();
  }
  CHECK_FALSE(a[5].contains("speculative"));  // it opted out
  CHECK(accepted > 0);
  // The short form, under the default rule: the same tokens whatever it chose to propose.
  auto cfg = run(base + " --speculative ngram:3,4 --output " + off_out.string());
  REQUIRE(cfg.code == 0);
  const auto c = lines(off_out);
  REQUIRE(c.size() == 6);
  for (int i = 0; i < 6; i++) CHECK(c[i]["generated_ids"] == a[i]["generated_ids"]);
  // A draft model (the target's own checkpoint): the same tokens again.
  auto drafted = run(base + " --speculative draft:" + kTinyA + ":3 --output " + off_out.string());
  REQUIRE(drafted.code == 0);
  const auto dr = lines(off_out);
  REQUIRE(dr.size() == 6);
  for (int i = 0; i < 6; i++) CHECK(dr[i]["generated_ids"] == a[i]["generated_ids"]);
  auto refused = [&](const std::string& flag, const std::string& says) {
    auto r = run(base + " " + flag);
    INFO(flag << " -> " << r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Contains(says));
  };
  refused("--speculative ngram:3", "--speculative: 'ngram:3' should be ngram:N,K");
  refused("--speculative ngram:3,x", "--speculative K: 'x' is not a whole number");
  refused("--speculative ngram:3,0", "K must be >= 1");
  refused("--speculative ngram:0,4", "1 <= ngram_min <= ngram_max");
  refused("--speculative eagle", "--speculative: 'eagle' is not one of none, ngram, ngram:N,K");
  refused("--speculative draft:models/distilgpt2",
          "--speculative draft models/distilgpt2: models/distilgpt2/config.json");
  refused("--speculative-config '{\"method\": \"eagle\"}'", "method \"eagle\" is not offered");
  refused("--speculative-config '{\"num_speculative_tokens\": 4, \"k\": 2}'", "unknown field 'k'");
  refused("--speculative-config '[1'", "--speculative-config: not valid JSON");
  refused("--speculative-config '{\"rule\": \"sometimes\"}'",
          "rule \"sometimes\" is not one of \"cost\", \"always\"");
  refused("--speculative ngram --speculative-config '{}'", "both given");
}

TEST_CASE(
    "batch sizes its memory first: a limit sets the pool; over it, an error naming the flag") {
  const fs::path in = servekit::test::temp_file("servekit_cli_memory.jsonl");
  {
    std::ofstream f(in);
    f << json{{"prompt_ids", {1, 2, 3}}, {"max_new_tokens", 2}, {"temperature", 0}}.dump() << "\n";
  }
  // The LoRA composition counts its adapter tiers (1 + 2 GiB by default) against the limit.
  const std::string base = "batch --model " + kTinyA + " --vocab " + kVocab + " --input " +
                           in.string() + " --kv paged16 --lora gathered --max-batch 2";
  auto ok = run(base + " --memory-limit 4GiB");
  INFO(ok.out);
  REQUIRE(ok.code == 0);
  CHECK_THAT(ok.out, Contains("batch: memory: KV cache") && Contains("adapter tiers 3.0 GiB") &&
                         Contains("of 4.0 GiB (memory_limit, --memory-limit)"));
  auto none = run(base + " --memory-limit 3GiB");
  CHECK(none.code != 0);
  CHECK_THAT(none.out, Contains("not even one") && Contains("--memory-limit") &&
                           Contains("adapter tiers 3.0 GiB"));
  CHECK_THAT(none.out, Contains("--adapter-host-memory"));
  // Smaller adapter tiers leave the KV cache room under the same limit.
  auto tiers = run(
      base + " --memory-limit 3GiB --adapter-host-memory 512MiB --adapter-device-memory 256MiB");
  INFO(tiers.out);
  REQUIRE(tiers.code == 0);
  CHECK_THAT(tiers.out, Contains("adapter tiers 768.0 MiB"));
  auto blocks = run(base + " --memory-limit 4GiB --kv-blocks 2000000000");
  CHECK(blocks.code != 0);
  CHECK_THAT(blocks.out, Contains("2000000000 blocks (kv_blocks, --kv-blocks)") &&
                             Contains("lower --kv-blocks to at most"));
  auto typo = run(base + " --memory-limit 4lots");
  CHECK(typo.code != 0);
  CHECK_THAT(typo.out, Contains("--memory-limit"));
}
