// SPDX-License-Identifier: Apache-2.0
// Constrained generation through the engine, on a random-weight model with GPT-2's whole
// vocabulary: the model itself "wants" garbage (its next-token distribution is close to
// uniform over 50257 tokens), so only the constraint makes the output valid.
//
// The corpus (tests/constrain/schemas.json, 38 schemas) x 20 sampled generations at
// temperature 1 are written to constrained_outputs.json for test_constrain_validate, which
// checks each with Python's jsonschema; here each must end complete and parse.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "servekit/model/gpt2.hpp"
#include "servekit/serve/engine.hpp"
#include "servekit/serve/generate.hpp"

namespace sk = servekit;
using namespace servekit;
using json = nlohmann::json;

namespace {

using D = sk::dims::Tiny<1, 2, 32, 50257, 256>;
using Host = sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Contiguous>>;

const text::Gpt2Tokenizer& tok() {
  static auto t = text::Gpt2Tokenizer::from_dir(std::filesystem::path(SERVEKIT_DATA) / "gpt2");
  return t;
}

json corpus() {
  std::ifstream in(std::filesystem::path(SERVEKIT_SOURCE_TESTS) / "constrain" / "schemas.json");
  REQUIRE(in);
  return json::parse(in);
}

serve::Request constrained(const std::shared_ptr<const constrain::Grammar>& g, uint64_t seed,
                           int max_new, float temperature = 1.f) {
  serve::Request r;
  r.prompt = "Here is the JSON:";
  r.sampling = {.temperature = temperature, .seed = seed};
  r.stop.max_new_tokens = max_new;
  r.json_schema = g;
  return r;
}

}  // namespace

TEST_CASE(
    "30+ schemas x 20 samples at temperature 1 on a random model: every output is "
    "complete and parses (jsonschema checks them next)",
    "[constrain]") {
  auto model = Host::random(11);
  const json schemas = corpus();
  REQUIRE(schemas.size() >= 30);
  serve::Engine<Host, serve::sched::Continuous> engine(model, tok(), {.max_batch = 16});
  std::vector<std::shared_ptr<const constrain::Grammar>> grammars;
  std::vector<serve::RequestHandle> hs;
  for (std::size_t i = 0; i < schemas.size(); i++) {
    grammars.push_back(constrain::compile_json_schema(schemas[i]));
    for (int k = 0; k < 20; k++)
      hs.push_back(engine.submit(constrained(grammars[i], 1000 * i + k, 64)));
  }
  json out = json::array();
  int complete = 0, i = 0;
  for (auto& h : hs) {
    const serve::Result r = h.get();
    const std::size_t s = static_cast<std::size_t>(i++) / 20;
    INFO("schema " << s << ": " << schemas[s].dump() << "\ntext: " << r.text
                   << "\nerror: " << r.error);
    REQUIRE(r.finish_reason == serve::finish::eos);
    CHECK_NOTHROW(json::parse(r.text));
    complete++;
    out.push_back({{"schema", s}, {"text", r.text}, {"tokens", r.tokens.size()}});
  }
  CHECK(complete == static_cast<int>(schemas.size()) * 20);
  std::ofstream("constrained_outputs.json") << json{{"schemas", schemas}, {"outputs", out}}.dump(1);
}

TEST_CASE("a constrained row changes nothing for the others: mixed batches == alone",
          "[constrain]") {
  auto model = Host::random(12);
  const json schemas = corpus();
  std::vector<serve::Request> rs;
  for (int i = 0; i < 12; i++) {
    serve::Request r;
    if (i % 2 == 0) {
      r = constrained(constrain::compile_json_schema(schemas[i]), 77 + i, 40,
                      i % 4 == 0 ? 0.f : 0.9f);
    } else {
      r.prompt = "Unconstrained text number " + std::to_string(i);
      r.stop.max_new_tokens = 12 + i;
      r.stop.stop_at_eos = false;
      r.sampling = {.temperature = i % 3 == 0 ? 0.f : 1.f, .seed = uint64_t(i)};
    }
    rs.push_back(r);
  }
  std::vector<serve::Result> want;
  for (const auto& r : rs) {
    serve::GenerateOptions o{.sampling = r.sampling, .stop = r.stop, .json_schema = r.json_schema};
    want.push_back(serve::generate(model, tok(), tok().encode(r.prompt), o));
  }
  serve::Engine<Host, serve::sched::Continuous> engine(model, tok(),
                                                       {.max_batch = 5, .max_batched_tokens = 16});
  std::vector<serve::RequestHandle> hs;
  for (const auto& r : rs) hs.push_back(engine.submit(r));
  for (std::size_t i = 0; i < rs.size(); i++) {
    const serve::Result got = hs[i].get();
    INFO("request " << i << ": " << want[i].text << " vs " << got.text);
    CHECK(got.ids() == want[i].ids());
    CHECK(got.finish_reason == want[i].finish_reason);
    CHECK(got.text == want[i].text);
  }
}

TEST_CASE(
    "the mask removes only what it must: greedy constrained == greedy unconstrained "
    "wherever that token is allowed",
    "[constrain]") {
  auto model = Host::random(13);
  // minLength keeps the string open for a while, so that most steps have a choice.
  const auto g =
      constrain::compile_json_schema(json::parse(R"({"type": "string", "minLength": 30})"));
  const auto v = constrain::Vocab::of(tok(), D::vocab, tok().eos_id());
  int agreed = 0, masked_out = 0;
  for (const char* prompt : {"The quote was", "A string:", "Say"}) {
    const auto ids = tok().encode(prompt);
    constexpr int kNew = 40;
    serve::GenerateOptions o{.stop = {.max_new_tokens = kNew}, .json_schema = g};
    const serve::Result r = serve::generate(model, tok(), ids, o);
    REQUIRE(r.tokens.size() >= 2);
    constrain::Constraint c(g, v);
    std::vector<int32_t> seq = ids;
    for (const auto& t : r.tokens) {
      const auto& words = c.mask(kNew - static_cast<int>(seq.size() - ids.size()));
      serve::GenerateOptions free{.stop = {.max_new_tokens = 1, .stop_at_eos = false}};
      const int32_t want = serve::generate(model, tok(), seq, free).tokens[0].id;
      if (words[want >> 5] >> (want & 31) & 1) {
        CHECK(t.id == want);
        agreed++;
      } else {
        masked_out++;
      }
      c.advance(t.id, t.id == tok().eos_id() ? std::string_view() : tok().token_view(t.id));
      seq.push_back(t.id);
    }
  }
  CHECK(agreed > 10);  // inside a string almost every token is allowed
}

TEST_CASE("a constrained request's errors are its own", "[constrain]") {
  auto model = Host::random(14);
  serve::Engine<Host, serve::sched::Continuous> engine(model, tok(), {.max_batch = 4});
  auto ok = engine.submit({.prompt = "hello", .stop = {.max_new_tokens = 8}});
  // A budget too small for any valid text still ends with tokens the grammar allows.
  auto tight = engine.submit(constrained(
      constrain::compile_json_schema(json::parse(
          R"({"type": "object", "properties": {"long_key_name": {"type": "string", "minLength": 5}},
              "required": ["long_key_name"]})")),
      5, 3));
  const serve::Result t = tight.get();
  CHECK(t.finish_reason == serve::finish::length);
  CHECK(t.text.rfind("{", 0) == 0);
  CHECK(ok.get().tokens.size() == 8u);
}

// Speculation on constrained rows: on the host each row's mask is made after the tokens before
// it were accepted, so a proposal the grammar refuses is simply never drawn; every request gets
// its tokens, text and logprobs alone. (Device backends do not speculate on constrained rows.)
TEST_CASE("constrained rows that speculate get their tokens alone", "[constrain][spec]") {
  auto model = Host::random(13);
  const json schemas = corpus();
  std::vector<serve::Request> rs;
  for (int i = 0; i < 10; i++)
    rs.push_back(constrained(constrain::compile_json_schema(schemas[i % 5]), 400 + i, 48,
                             i % 3 == 0 ? 0.f : 0.9f));
  std::vector<serve::Result> want;
  for (const auto& r : rs) {
    serve::GenerateOptions o{.sampling = r.sampling, .stop = r.stop, .json_schema = r.json_schema};
    want.push_back(serve::generate(model, tok(), tok().encode(r.prompt), o));
  }
  serve::Engine<Host, serve::sched::Continuous> engine(
      model, tok(),
      {.max_batch = 4,
       .max_batched_tokens = 32,
       .speculative = {.k = 4, .rule = serve::SpecRule::always}});
  auto got = engine.run_all(rs);
  for (std::size_t i = 0; i < rs.size(); i++) {
    INFO("request " << i << ": " << want[i].text << " vs " << got[i].text);
    CHECK(got[i].ids() == want[i].ids());
    CHECK(got[i].text == want[i].text);
    REQUIRE(got[i].tokens.size() == want[i].tokens.size());
    for (std::size_t t = 0; t < got[i].tokens.size(); t++)
      CHECK(got[i].tokens[t].logprob == want[i].tokens[t].logprob);
  }
  engine.wait_idle();
  CHECK(engine.stats().spec_proposed > 0);
  CHECK(engine.stats().spec_accepted > 0);
  {
    INFO(
        "a draft model proposing (the model's twin): proposals the grammar refuses are drawn "
        "never");
    serve::EngineOptions o{.max_batch = 4,
                           .max_batched_tokens = 32,
                           .speculative = {.k = 4, .rule = serve::SpecRule::always}};
    o.speculative.draft =
        std::make_shared<serve::DraftModel<Host>>(std::make_shared<Host>(Host::random(13)), 4);
    serve::Engine<Host, serve::sched::Continuous> drafted(model, tok(), o);
    auto again = drafted.run_all(rs);
    for (std::size_t i = 0; i < rs.size(); i++) {
      INFO("request " << i << ": " << want[i].text << " vs " << again[i].text);
      CHECK(again[i].ids() == want[i].ids());
      REQUIRE(again[i].tokens.size() == want[i].tokens.size());
      for (std::size_t t = 0; t < again[i].tokens.size(); t++)
        CHECK(again[i].tokens[t].logprob == want[i].tokens[t].logprob);
    }
    drafted.wait_idle();
    CHECK(drafted.stats().spec_accepted > 0);
  }
}

// Constrained requests behind one long system prompt: the later ones map its cached blocks, and
// each still gets the tokens (and logprobs, bit for bit) it gets alone without any cache reuse.
TEST_CASE("constrained rows that reuse a cached prefix get their tokens alone",
          "[constrain][prefix]") {
  using Paged = sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Paged<16>>>;
  auto model = Paged::random(13);
  const json schemas = corpus();
  const std::string system =
      "You are a careful assistant. Answer every question with exactly one JSON document that "
      "fits the schema you are given, and write nothing before or after it. ";
  std::vector<serve::Request> rs;
  for (int i = 0; i < 10; i++) {
    auto r = constrained(constrain::compile_json_schema(schemas[i % 5]), 300 + i, 32,
                         i % 3 == 0 ? 0.f : 0.9f);
    r.prompt = system + r.prompt;
    rs.push_back(r);
  }
  std::vector<serve::Result> want;
  for (const auto& r : rs) {
    serve::GenerateOptions o{.sampling = r.sampling, .stop = r.stop, .json_schema = r.json_schema};
    want.push_back(serve::generate(model, tok(), tok().encode(r.prompt), o));
  }
  serve::Engine<Paged, serve::sched::Continuous> engine(model, tok(),
                                                        {.max_batch = 4, .max_batched_tokens = 32});
  std::vector<serve::Result> got;
  for (const auto& r : rs) got.push_back(engine.generate(r));  // one by one: each finds the last
  for (std::size_t i = 0; i < rs.size(); i++) {
    INFO("request " << i << ": " << want[i].text << " vs " << got[i].text);
    CHECK(got[i].ids() == want[i].ids());
    CHECK(got[i].text == want[i].text);
    REQUIRE(got[i].tokens.size() == want[i].tokens.size());
    for (std::size_t t = 0; t < got[i].tokens.size(); t++)
      CHECK(got[i].tokens[t].logprob == want[i].tokens[t].logprob);
    if (i > 0) CHECK(got[i].metrics.cached_tokens >= 32);
  }
  CHECK(engine.stats().prefix_cache_hits > 0);
}

// Where the grammar leaves one text to write, the mask holds its next canonical token alone:
// the tokenizer's own tokens of that text, less its last pre-token (constrain/forced_tokens.hpp).
TEST_CASE("forced text is written in its canonical tokens, a one-token mask each",
          "[constrain][jump]") {
  const auto g = constrain::compile_json_schema(json::parse(
      R"({"type": "object", "properties": {"colour": {"enum": ["dark red", "dark blue"]}},
          "required": ["colour"], "additionalProperties": false})"));
  const auto v = constrain::Vocab::of(tok(), D::vocab, tok().eos_id());
  constrain::Constraint c(g, v);
  std::vector<int32_t> run;
  // Nothing is written yet: '{' then the only key, its colon; then a space or the value.
  const auto f = c.forced_text();
  CHECK(f.text == R"({"colour":)");
  CHECK_FALSE(f.whole);
  constrain::forced_tokens(c, tok(), run);
  CHECK(run == tok().encode(R"({"colour)"));  // `":` may join what follows
  for (int32_t t : run) c.advance(t, tok().token_view(t));
  for (char ch : std::string(R"(": "dark)")) c.advance(-1, std::string_view(&ch, 1));
  // " red" or " blue": a space, then a choice; the space alone is left to the model (it may
  // join the word after it). After " re", `d"}` is forced and nothing may follow it.
  CHECK(c.forced_text().text == " ");
  constrain::forced_tokens(c, tok(), run);
  CHECK(run.empty());
  for (char ch : std::string(" re")) c.advance(-1, std::string_view(&ch, 1));
  const auto end = c.forced_text();
  CHECK(end.text == "d\"}");
  CHECK(end.whole);
  constrain::forced_tokens(c, tok(), run);
  CHECK(run == tok().encode("d\"}"));

  // Through a request: every step whose mask is one token writes the run's tokens in order.
  serve::Request r = constrained(g, 5, 40);
  serve::RequestState st(1, r, tok().encode(r.prompt), tok(), D::n_positions, D::vocab);
  constrain::Constraint free(g, v);
  int forced = 0;
  std::mt19937 rng(3);
  std::vector<float> logits(D::vocab);
  serve::Sampler sampler;
  while (!st.finished()) {
    const uint32_t* m = st.next_mask();
    const auto& all = free.mask(1000);
    int allowed = 0, last = -1;
    for (int i = 0; i < D::vocab; i++)
      if (m[i >> 5] >> (i & 31) & 1) allowed++, last = i;
    for (int i = 0; i < D::vocab; i++)  // the request's mask is within the grammar's
      if (m[i >> 5] >> (i & 31) & 1) REQUIRE((all[i >> 5] >> (i & 31) & 1));
    if (allowed == 1 && last != tok().eos_id()) {
      forced++;
      constrain::forced_tokens(free, tok(), run);
      REQUIRE_FALSE(run.empty());
      CHECK(run.front() == last);
    }
    std::uniform_real_distribution<float> u(-3, 3);
    for (float& x : logits) x = u(rng);
    st.on_logits(logits, sampler);
    const int32_t t = st.tokens().back();
    free.advance(t, t == tok().eos_id() ? std::string_view() : tok().token_view(t));
  }
  CHECK(forced >= 3);
  CHECK(st.result().finish_reason == serve::finish::eos);
  CHECK(json::parse(st.result().text)["colour"].get<std::string>().rfind("dark ", 0) == 0);
}

// Jump-forward: the forced tokens come without a step each, and every request's tokens, text
// and logprobs are those of one step each, alone (generate()), whatever shares its steps, with
// or without speculation, on a contiguous or paged cache, in chunks or not.
TEST_CASE("jump-forward changes how many steps, not which tokens", "[constrain][jump]") {
  using Paged = sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Paged<16>>>;
  auto model = Paged::random(21);
  const json schemas = corpus();
  std::vector<serve::Request> rs;
  for (int i = 0; i < 16; i++)
    rs.push_back(constrained(constrain::compile_json_schema(schemas[(3 * i) % schemas.size()]),
                             900 + i, 48, i % 4 == 0 ? 0.f : 0.9f));
  rs[3].top_logprobs = 3;  // takes its forced tokens a step each
  std::vector<serve::Result> want;
  for (const auto& r : rs) {
    serve::GenerateOptions o{.sampling = r.sampling,
                             .stop = r.stop,
                             .top_logprobs = r.top_logprobs,
                             .json_schema = r.json_schema};
    want.push_back(serve::generate(model, tok(), tok().encode(r.prompt), o));
  }
  struct Case {
    const char* name;
    bool jump;
    int k, budget;
    bool draft = false;
  };
  long steps_off = 0;
  // A draft model's slot must forget the proposals a forced run replaced (serve/draft_model.hpp).
  static Host twin = Host::random(21);  // the target's weights
  for (const Case& k : {Case{"off", false, 0, 64}, Case{"on", true, 0, 64},
                        Case{"on, chunked", true, 0, 6}, Case{"on, speculating", true, 3, 64},
                        Case{"on, a draft model speculating", true, 3, 64, true}}) {
    serve::EngineOptions o;
    o.max_batch = 5;
    o.max_batched_tokens = k.budget;
    o.jump_forward = k.jump;
    o.speculative = {.k = k.k, .rule = serve::SpecRule::always};
    if (k.draft) o.speculative.draft = std::make_shared<serve::DraftModel<Host>>(twin, 5);
    serve::Engine<Paged, serve::sched::Continuous> engine(model, tok(), o);
    auto got = engine.run_all(rs);
    int forced = 0;
    for (std::size_t i = 0; i < rs.size(); i++) {
      INFO(k.name << ", request " << i << ": " << want[i].text << " vs " << got[i].text);
      CHECK(got[i].ids() == want[i].ids());
      CHECK(got[i].text == want[i].text);
      CHECK(got[i].finish_reason == want[i].finish_reason);
      REQUIRE(got[i].tokens.size() == want[i].tokens.size());
      for (std::size_t t = 0; t < got[i].tokens.size(); t++) {
        CHECK(got[i].tokens[t].logprob == want[i].tokens[t].logprob);
        CHECK(got[i].tokens[t].top.size() == want[i].tokens[t].top.size());
      }
      forced += got[i].metrics.forced_tokens;
      if (i == 3) CHECK(got[i].metrics.forced_tokens == 0);
    }
    engine.wait_idle();
    const auto s = engine.stats();
    INFO(k.name << ": " << s.steps << " steps, " << s.forced_tokens << " forced tokens");
    CHECK(s.forced_tokens == forced);
    if (!k.jump) {
      CHECK(forced == 0);
      steps_off = s.steps;
    } else {
      CHECK(forced >= 30);
      if (k.k == 0 && k.budget == 64) CHECK(s.steps < steps_off);
    }
  }
}

// GBNF grammars through the engine: every text that ends with end-of-text is one of the
// grammar's, and a request gets the same tokens alone (generate(), a step each) as in a batch
// with jump-forward.
TEST_CASE("GBNF grammars through the engine: texts fit, tokens as alone", "[constrain][gbnf]") {
  auto model = Host::random(31);
  const char* grammars[] = {
      "root ::= \"(\" expr \")\"\nexpr ::= num (\" \" [-+*] \" \" num)*\nnum ::= [0-9]{1,3}\n",
      "root ::= \"name: \" [A-Z] [a-z]+ \", tags: [\" tag (\", \" tag)* \"]\"\n"
      "tag ::= \"\\\"\" (\"red\" | \"green\" | \"blue\") \"\\\"\"\n"};
  std::vector<serve::Request> rs;
  for (int i = 0; i < 8; i++)
    rs.push_back(
        constrained(constrain::compile_gbnf(grammars[i % 2]), 50 + i, 40, i % 3 == 0 ? 0.f : 1.f));
  serve::Engine<Host, serve::sched::Continuous> engine(model, tok(), {.max_batch = 4});
  const auto got = engine.run_all(rs);
  int ended = 0;
  for (std::size_t i = 0; i < rs.size(); i++) {
    serve::GenerateOptions o{
        .sampling = rs[i].sampling, .stop = rs[i].stop, .json_schema = rs[i].json_schema};
    const serve::Result want = serve::generate(model, tok(), tok().encode(rs[i].prompt), o);
    INFO("request " << i << ": " << got[i].text);
    CHECK(got[i].ids() == want.ids());
    CHECK(got[i].text == want.text);
    if (got[i].finish_reason != serve::finish::eos) continue;
    constrain::Matcher m(*rs[i].json_schema);
    constrain::State s, n;
    m.start(s);
    for (char c : got[i].text) {
      m.feed(s, static_cast<uint8_t>(c), n);
      std::swap(s, n);
      REQUIRE_FALSE(s.dead());
    }
    CHECK(m.accepts(s));
    ended++;
  }
  CHECK(ended >= 4);
  engine.wait_idle();
  CHECK(engine.stats().forced_tokens > 0);  // "name: ", ", tags: [" and the like
}
