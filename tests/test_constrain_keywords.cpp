// SPDX-License-Identifier: Apache-2.0
// The JSON-schema keywords that need more than a value's own shape: not (of types),
// uniqueItems over a finite set, patternProperties; what they accept and refuse, the schemas
// they cannot honour, and budgeted masks through them (every text ends complete and valid).
#include <catch2/catch.hpp>

#include <filesystem>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "constrain_helpers.hpp"
#include "servekit/constrain/token_mask.hpp"

using namespace servekit;
using namespace servekit::constrain;
using json = nlohmann::json;
using namespace constrain_test;

TEST_CASE("not of a type leaves the schema's other types") {
  const json no_null = json::parse(R"({"not": {"type": "null"}})");
  for (const char* ok : {"1", "-2.5", R"("a")", "{}", "[null]", "true"}) CHECK(fits(no_null, ok));
  CHECK_FALSE(fits(no_null, "null"));
  const json some = json::parse(R"({"type": ["integer", "string", "null"], "minLength": 2,
                                    "not": {"type": ["string", "null"]}})");
  CHECK(fits(some, "42"));
  CHECK_FALSE(fits(some, R"("ab")"));
  CHECK_FALSE(fits(some, "null"));
  const json values = json::parse(R"({"enum": [1, "a", null, 2.5], "not": {"type": "number"}})");
  CHECK(fits(values, R"("a")"));
  CHECK(fits(values, "null"));
  CHECK_FALSE(fits(values, "1"));
  CHECK_FALSE(fits(values, "2.5"));

  CHECK_THAT(error_of(R"({"not": {"enum": ["admin"]}})"), Catch::Contains("at /not"));
  CHECK_THAT(error_of(R"({"not": {"enum": ["admin"]}})"), Catch::Contains("not with 'enum'"));
  CHECK_THAT(error_of(R"({"not": {"minLength": 3}})"), Catch::Contains("with a type only"));
  CHECK_THAT(error_of(R"({"type": "string", "not": {"type": "string"}})"),
             Catch::Contains("excludes every type"));
  CHECK_THAT(error_of(R"({"type": "number", "not": {"type": "integer"}})"),
             Catch::Contains("numbers with a fraction"));
  CHECK_THAT(error_of(R"({"not": {"type": 3}})"), Catch::Contains("type must be a name"));
}

TEST_CASE("uniqueItems over a finite set writes each value once at most") {
  const json abc = json::parse(R"({"type": "array", "items": {"enum": ["a", "b", "c"]},
                                   "uniqueItems": true})");
  CHECK(fits(abc, R"(["c","a"])"));
  CHECK(fits(abc, R"(["a", "b", "c"])"));
  CHECK(fits(abc, "[]"));
  CHECK_FALSE(fits(abc, R"(["a","a"])"));
  CHECK_FALSE(fits(abc, R"(["a","b","a"])"));
  CHECK_FALSE(fits(abc, R"(["a","b","c",)"));  // no fourth value is left
  const json flags = json::parse(R"({"type": "array", "items": {"type": "boolean"},
                                     "uniqueItems": true, "minItems": 2})");
  CHECK(fits(flags, "[true,false]"));
  {  // the shortest text counts different values: [true,false], not [true,true]
    const auto g = compile_json_schema(flags);
    Matcher m(*g);
    State s;
    m.start(s);
    CHECK(m.min_finish(s) == 12);
  }
  CHECK_FALSE(fits(flags, "[true,true]"));
  CHECK_FALSE(fits(flags, "[true]"));
  // anyOf of consts (through $defs), and one value in two spellings.
  const json mixed = json::parse(R"({"$defs": {"one": {"const": 1}}, "type": "array",
      "items": {"anyOf": [{"$ref": "#/$defs/one"}, {"enum": [1.0, 2, null]}]}, "uniqueItems": true})");
  CHECK(fits(mixed, "[2,1,null]"));
  CHECK_FALSE(fits(mixed, "[1,1.0]"));
  CHECK_FALSE(fits(mixed, "[null,null]"));
  const json off =
      json::parse(R"({"type": "array", "items": {"type": "string"}, "uniqueItems": false})");
  CHECK(fits(off, R"(["x","x"])"));

  CHECK_THAT(error_of(R"({"type": "array", "items": {"type": "string"}, "uniqueItems": true})"),
             Catch::Contains("finite set of values"));
  CHECK_THAT(error_of(R"({"type": "array", "uniqueItems": true})"), Catch::Contains("finite set"));
  CHECK_THAT(
      error_of(
          R"({"type": "array", "items": {"enum": [1, 2]}, "minItems": 3, "uniqueItems": true})"),
      Catch::Contains("minItems 3 > the 2 distinct values"));
  CHECK_THAT(error_of(R"({"type": "array", "items": {"enum": [1]}, "uniqueItems": "yes"})"),
             Catch::Contains("uniqueItems must be true or false"));
  CHECK_THAT(error_of(R"({"type": "array", "prefixItems": [{"const": 1}], "uniqueItems": true})"),
             Catch::Contains("beside prefixItems"));
}

TEST_CASE("patternProperties: keys by pattern take their pattern's values") {
  const json headers = json::parse(R"({"type": "object",
      "properties": {"id": {"type": "string"}}, "required": ["id"],
      "patternProperties": {"^x-[a-z]+$": {"type": "integer"}, "^[0-9]{2}$": {"type": "boolean"}}})");
  CHECK(fits(headers, R"({"id":"a","x-trace":7,"42":true})"));
  CHECK(fits(headers, R"({"x-a":1, "id":"q"})"));
  CHECK_FALSE(fits(headers, R"({"id":"a","y":1})"));          // matches no pattern
  CHECK_FALSE(fits(headers, R"({"id":"a","x-trace":"7"})"));  // the pattern's schema
  CHECK_FALSE(fits(headers, R"({"id":"a","42":1})"));
  CHECK_FALSE(fits(headers, R"({"id":"a","x-Trace":1})"));
  const json only =
      json::parse(R"({"type": "object", "patternProperties": {"^[a-z]+$": {"type": "number"}},
                                    "additionalProperties": false})");
  CHECK(fits(only, R"({"a":1,"bc":2.5})"));
  CHECK(fits(only, "{}"));
  CHECK_FALSE(fits(only, R"({"A":1})"));

  CHECK_THAT(error_of(R"({"type": "object", "patternProperties": {"^a": {}, "b$": {}}})"),
             Catch::Contains("may match both this pattern and an earlier one"));
  CHECK_THAT(error_of(R"({"type": "object", "properties": {"x-id": {}},
                          "patternProperties": {"^x-": {}}})"),
             Catch::Contains("matches the listed property \"x-id\""));
  CHECK_THAT(error_of(R"({"type": "object", "patternProperties": {"^a$": {}},
                          "additionalProperties": {"type": "string"}})"),
             Catch::Contains("must be false or absent"));
  CHECK_THAT(error_of(R"j({"type": "object", "patternProperties": {"(?=a)": {}}})j"),
             Catch::Contains("/patternProperties/(?=a)"));
  CHECK_THAT(error_of(R"({"type": "object", "patternProperties": []})"),
             Catch::Contains("patternProperties must be an object"));
}

TEST_CASE("budgeted masks through ranges, unique items and pattern keys end complete and valid") {
  const json schema = json::parse(R"({"type": "object", "properties": {
      "price": {"type": "number", "minimum": 10.5, "maximum": 12},
      "tags": {"type": "array", "items": {"enum": ["red", "green", "blue", "cyan"]},
               "uniqueItems": true, "minItems": 3},
      "n": {"type": "integer", "minimum": 1000, "multipleOf": 7}},
    "required": ["price", "tags", "n"],
    "patternProperties": {"^k[0-9]$": {"not": {"type": ["object", "array"]}}}})");
  const auto g = compile_json_schema(schema);
  const auto v = Vocab::of(tok(), tok().vocab_size(), tok().eos_id());
  Matcher m(*g);
  State s0;
  m.start(s0);
  const int need = m.min_finish(s0);
  // min_finish is honest from the start: a budget of just that many tokens allows some.
  REQUIRE(MaskMaker(*g, *v).make(s0, need + 1).allowed > 0);
  std::mt19937 rng(23);
  for (int run = 0; run < 30; run++) {
    const int budget = need + 1 + run;
    Constraint c(g, v);
    const std::string text = budget_walk(c, budget, rng);
    INFO("budget " << budget << ": " << text);
    REQUIRE(c.accepts());
    const json j = json::parse(text);
    CHECK(j["price"].get<double>() >= 10.5);
    CHECK(j["price"].get<double>() <= 12);
    CHECK(j["n"].get<int64_t>() % 7 == 0);
    CHECK(j["n"].get<int64_t>() >= 1000);
    std::set<std::string> tags;
    for (const auto& t : j["tags"]) tags.insert(t.get<std::string>());
    CHECK(tags.size() == j["tags"].size());
    CHECK(tags.size() >= 3);
    for (const auto& [k, val] : j.items())
      if (k != "price" && k != "tags" && k != "n") {
        CHECK(k.size() == 2);
        CHECK(k[0] == 'k');
        CHECK_FALSE(val.is_structured());
      }
  }
}
