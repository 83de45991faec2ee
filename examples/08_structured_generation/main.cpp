// SPDX-License-Identifier: Apache-2.0
// Lesson 8 (the course's bonus): structured generation.
//
// A model asked for JSON writes text that usually looks like JSON and often is not: a missing
// quote, a key it made up, a number where a string belongs. Constrained decoding makes the
// answer valid by construction: the schema is compiled into a matcher over bytes
// (constrain/grammar.hpp, matcher.hpp), and before each token is drawn every token whose bytes
// would break the JSON gets -inf (constrain/token_mask.hpp; on a GPU, kernels/token_mask.hpp).
// Nothing else changes: the same model, the same sampler, the same engine.
//
// This example takes the course's Person schema (pydantic's Person(name: constr(max_length=10),
// age: int)) and its named-entity prompt, and generates, with the same seeds:
//   1. without the constraint, and tries to parse each answer;
//   2. with it (Request::json_schema), and parses and checks each answer;
//   3. shows the masks at work: how many of the vocabulary's tokens each step allowed.
// Look at: (1) failing to parse, (2) always parsing, with `name` at most 10 characters and an
// integer `age`; and in (3) how the mask narrows to a handful inside keys and punctuation and
// opens up inside a string. With --model DIR it uses a Hugging Face GPT-2; without, a seeded
// random GPT-2 124M, whose unconstrained text is noise, which makes the point all the better.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "common/run.hpp"
#include "servekit/constrain/token_mask.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/model/random_gpt2.hpp"
#include "servekit/serve/generate.hpp"

namespace sk = servekit;
namespace serve = servekit::serve;
using json = nlohmann::json;

struct Args {
  std::string model, vocab;
  std::string prompt =
      "Your task is to extract the named entities from the text below as JSON.\n"
      "Text: Jason Miller is 32 years old and works as an engineer in Austin.\nJSON: ";
  int tokens = 48, samples = 3;
};

// The course's Person, as pydantic's Person.model_json_schema() writes it.
const char* kPerson =
    R"({"properties": {"name": {"maxLength": 10, "title": "Name", "type": "string"},
  "age": {"title": "Age", "type": "integer"}}, "required": ["name", "age"], "title": "Person",
  "type": "object"})";

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s.size() > 90 ? s.substr(0, 87) + "..." : s;
}

template <class D>
int lesson(const Args& a, const sk::text::Gpt2Tokenizer& tok) {
  std::printf("loading %s ...\n", a.model.empty() ? "random GPT-2 124M (seed 0)" : a.model.c_str());
  sk::Gpt2<sk::Config<D>> m(a.model.empty() ? sk::model::random_gpt2<D>(0)
                                            : sk::model::load_gpt2<D>(a.model));
  const auto schema = sk::constrain::compile_json_schema(std::string_view(kPerson));
  const auto prompt = tok.encode(a.prompt);
  std::printf("prompt: %s\nschema: %s\n", one_line(a.prompt).c_str(),
              json::parse(kPerson).dump().c_str());

  int free_ok = 0, cons_ok = 0;
  serve::Result shown;
  for (int pass = 0; pass < 2; pass++) {
    const bool constrained = pass == 1;
    std::printf("\n== %d. %s, %d samples at temperature 0.8\n", pass + 1,
                constrained ? "with the schema" : "without a constraint", a.samples);
    for (int s = 0; s < a.samples; s++) {
      serve::GenerateOptions o;
      o.sampling = {.temperature = 0.8f, .seed = uint64_t(s + 1)};
      o.stop = {.max_new_tokens = a.tokens};
      if (constrained)
        o.json_schema = schema;
      else
        o.stop.stop_strings = {"\n"};
      const auto r = serve::generate(m, tok, prompt, o);
      std::string verdict;
      try {
        const json j = json::parse(r.text);
        const bool fits = j.is_object() && j.contains("name") && j["name"].is_string() &&
                          j.contains("age") && j["age"].is_number_integer();
        verdict = fits ? "parses, fits Person" : "parses, but is not a Person";
        (constrained ? cons_ok : free_ok) += fits;
      } catch (const json::exception&) {
        verdict = "does not parse";
      }
      std::printf("  seed %d: %-40s -> %s\n", s + 1, ("|" + one_line(r.text) + "|").c_str(),
                  verdict.c_str());
      if (constrained && s == 0) shown = r;
    }
  }
  std::printf("\nvalid Person: %d of %d without the constraint, %d of %d with it\n", free_ok,
              a.samples, cons_ok, a.samples);

  std::printf("\n== 3. the masks of seed 1's constrained answer: tokens allowed at each step\n");
  sk::constrain::Constraint c(schema, sk::constrain::Vocab::of(tok, D::vocab, tok.eos_id()));
  int k = 0;
  for (const auto& t : shown.tokens) {
    const auto& words = c.mask(a.tokens - k++);
    long n = 0;
    for (uint32_t w : words) n += __builtin_popcount(w);
    const std::string piece = t.id == tok.eos_id() ? "<eos>" : std::string(tok.token_view(t.id));
    std::printf("  %-14s %6ld of %d\n",
                json(piece).dump(-1, ' ', false, json::error_handler_t::replace).c_str(), n,
                D::vocab);
    c.advance(t.id, t.id == tok.eos_id() ? std::string_view() : tok.token_view(t.id));
  }
  return cons_ok == a.samples ? 0 : 1;
}

int main(int argc, char** argv) {
  CLI::App app{"Lesson 8: structured generation"};
  Args a;
  sk::examples::add_model_options(app, a.model, a.vocab);
  app.add_option("--prompt", a.prompt, "prompt text");
  app.add_option("--tokens", a.tokens, "max tokens per answer")->check(CLI::Range(8, 512));
  app.add_option("--samples", a.samples, "answers per pass")->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);
  return sk::examples::run_lesson(
      "08_structured_generation", a.model, a.vocab,
      [&]<class D>(std::type_identity<D>, const sk::text::Gpt2Tokenizer& tok) {
        return lesson<D>(a, tok);
      });
}
