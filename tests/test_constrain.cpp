// SPDX-License-Identifier: Apache-2.0
// JSON-schema constraints on the host: the schema compiler's errors, the matcher against
// texts that do and do not fit, the token masks against feeding every token on its own, and
// budget-forced closing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "constrain_helpers.hpp"
#include "servekit/constrain/token_mask.hpp"

using namespace servekit;
using namespace servekit::constrain;
using json = nlohmann::json;
using namespace constrain_test;

namespace {

const json kPerson = json::parse(R"j({"title": "Person", "type": "object",
  "properties": {"name": {"title": "Name", "maxLength": 10, "type": "string"},
                 "age": {"title": "Age", "type": "integer"}},
  "required": ["name", "age"]})j");

}  // namespace

TEST_CASE("a schema the compiler cannot honour is an error naming the keyword and where") {
  CHECK_THAT(error_of(R"j({"type": "object", "properties": {"h": {"format": "hostname",
                                                                  "type": "string"}}})j"),
             Catch::Contains("format \"hostname\" is not supported") &&
                 Catch::Contains("at /properties/h") && Catch::Contains("date-time"));
  CHECK_THAT(error_of(R"j({"type": "string", "format": "date", "pattern": "^2"})j"),
             Catch::Contains("'format' beside 'pattern'"));
  CHECK_THAT(error_of(R"j({"type": "string", "format": 7})j"),
             Catch::Contains("format must be a string"));
  CHECK_THAT(
      error_of(R"j({"type": "object", "properties": {"a": {"type": "number", "minLength": 0}}})j"),
      Catch::Contains("at /properties/a") && Catch::Contains("'minLength'") &&
          Catch::Contains("'number'"));
  CHECK_THAT(error_of(R"j({"type": "object", "properties": {"a": {}}, "required": ["b"]})j"),
             Catch::Contains("\"b\", which is not in properties"));
  CHECK_THAT(
      error_of(R"j({"oneOf": [{"type": "integer"}, {"type": "number"}]})j"),
      Catch::Contains("oneOf alternatives 0 and 1 may both fit") && Catch::Contains("\"number\""));
  CHECK_THAT(error_of(R"j({"properties": {"a": {"oneOf": [{"type": "string"},
                                                   {"enum": ["x", 1]}]}}})j"),
             Catch::Contains("at /properties/a") && Catch::Contains("may both fit"));
  CHECK_THAT(error_of(R"j({"oneOf": [{"type": "string"}, {"minLength": 2}]})j"),
             Catch::Contains("at /oneOf/1") && Catch::Contains("declares none"));
  CHECK_THAT(error_of(R"j({"oneOf": [{"type": "string"}], "type": "string"})j"),
             Catch::Contains("keyword 'type' beside oneOf"));
  CHECK_THAT(error_of(R"j({"type": "string", "pattern": "(?=a)b"})j"),
             Catch::Contains("lookaround"));
  CHECK_THAT(error_of(R"j({"type": "string", "pattern": "(a)\\1"})j"),
             Catch::Contains("backreferences"));
  CHECK_THAT(error_of(R"j({"type": "string", "pattern": "(ab"})j"),
             Catch::Contains("unterminated group"));
  CHECK_THAT(error_of(R"j({"type": "string", "pattern": "ab)"})j"),
             Catch::Contains("unmatched ')'"));
  CHECK_THAT(error_of(R"j({"type": "string", "pattern": "a|^b"})j"),
             Catch::Contains("'^' or '$' inside"));
  CHECK_THAT(error_of(R"j({"type": "string", "pattern": "a**"})j"),
             Catch::Contains("a quantifier after a quantifier"));
  CHECK_THAT(error_of(R"j({"type": "string", "pattern": "^(a{0})$x"})j"),
             Catch::Contains("'^' or '$' inside"));
  CHECK_THAT(error_of(R"j({"type": "string", "pattern": "[a-z"})j"),
             Catch::Contains("unterminated class"));
  // Refused before it is expanded (the fuzz target's: 77 M positions took over 2 GiB).
  CHECK_THAT(error_of(R"j({"type": "string", "pattern": "^[a-z]{77777741}$"})j"),
             Catch::Contains("more than 63 positions"));
  CHECK_THAT(error_of(R"j({"type": "string", "pattern": "^a{2147483647,}$"})j"),
             Catch::Contains("more than 63 positions"));
  CHECK_THAT(error_of(R"j({"$ref": "#/$defs/missing"})j"), Catch::Contains("points at nothing"));
  CHECK_THAT(error_of(R"j({"$ref": "http://x/y.json"})j"), Catch::Contains("not local"));
  CHECK_THAT(error_of(R"j({"type": "strin"})j"), Catch::Contains("unsupported type \"strin\""));
  CHECK_THAT(error_of(R"j({"type": "array", "minItems": 3, "maxItems": 2})j"),
             Catch::Contains("minItems 3 > maxItems 2"));
  CHECK_THAT(error_of(R"j({"type": "integer", "minimum": 5, "maximum": 4})j"),
             Catch::Contains("range is empty"));
  CHECK_THAT(error_of(R"j({"type": "object", "properties": )j"), Catch::Contains("not JSON"));
  CHECK_THAT(error_of(R"j(false)j"), Catch::Contains("allows no value"));
  CHECK_THAT(error_of("4444444444E44444644444445454444"), Catch::Contains("not JSON"));  // fuzz
  // A number no int64 holds is refused by name, not converted (fuzzing found the conversion).
  CHECK_THAT(
      error_of(
          R"j({"type": "array", "maxItems": 3777777777777777777777777777777777777777777777777777.0})j"),
      Catch::Contains("'maxItems' is out of range"));
  CHECK_THAT(error_of(R"j({"type": "string", "minLength": -1e300})j"),
             Catch::Contains("'minLength' is out of range"));
  CHECK_THAT(
      error_of(R"j({"$defs": {"n": {"type": "object", "properties": {"n": {"$ref": "#/$defs/n"}},
                          "required": ["n"]}}, "$ref": "#/$defs/n"})j"),
      Catch::Contains("no finite JSON text"));
}

namespace {

// Whether the pattern (compile_pattern) matches the whole string s.
bool pattern_matches(const Pattern& p, std::string_view s) {
  uint64_t st = p.start();
  for (char c : s) {
    st = p.step(st, static_cast<uint8_t>(c));
    if (st == 0) return false;
  }
  return p.accepts(st);
}

// A string the pattern matches, drawn by walking its automaton: at each step a random character
// that keeps a match reachable, stopping where one is complete with probability 1/4 (or once
// the string is long and the shortest way to a match is taken).
std::string draw(const Pattern& p, std::mt19937& rng) {
  std::string s;
  uint64_t st = p.start();
  while (true) {
    if (p.accepts(st) && (rng() % 4 == 0 || s.size() > 40)) return s;
    std::vector<std::pair<char, uint64_t>> next;
    for (int c = 0x20; c < 0x7f; c++) {
      const uint64_t t = p.step(st, static_cast<uint8_t>(c));
      if (t == 0 || p.chars_needed(t) >= kInf) continue;
      if (s.size() > 40 && p.chars_needed(t) >= p.chars_needed(st)) continue;
      next.emplace_back(static_cast<char>(c), t);
    }
    if (next.empty()) return s;  // accepts: nothing may follow
    const auto& [c, t] = next[rng() % next.size()];
    s += c, st = t;
  }
}

}  // namespace

TEST_CASE("patterns match what ECMAScript regular expressions match") {
  // Groups, alternation, quantified groups, counted and lazy repetition, empty alternatives:
  // against std::regex (ECMAScript) on random strings over the patterns' characters and on
  // strings drawn from the patterns themselves. Unanchored ends search, as JSON schema's do.
  const char* res[] = {"^(ab|cd)+e?$",
                       "^(a|b)*abb$",
                       "^(?:x{2,3}|y)z*$",
                       "^([a-c]d|e){2}$",
                       "^((a|b)c)?d$",
                       "^a(b|)c$",
                       "^[0-9]{1,3}(\\.[0-9]{1,3}){0,2}$",
                       "b(a|c)",
                       "^(a+|b+)+c$",
                       "^x(y(z|a)*)?$",
                       "^(ab)*?c+?$",
                       "^[^a-c]\\d?(e|f){1,}$",
                       "a{2}$"};
  std::mt19937 rng(5);
  const std::string alphabet = "abcdefxyz0123.";
  for (const char* re_text : res) {
    INFO(re_text);
    const Pattern p = compile_pattern(re_text, "");
    const std::regex ref(re_text, std::regex::ECMAScript);
    const bool anchored = re_text[0] == '^';
    auto ref_ok = [&](const std::string& s) {
      return anchored ? std::regex_match(s, ref) : std::regex_search(s, ref);
    };
    int matched = 0;
    for (int k = 0; k < 3000; k++) {
      std::string s;
      for (int n = static_cast<int>(rng() % 9); n > 0; n--) s += alphabet[rng() % alphabet.size()];
      INFO(s);
      REQUIRE(pattern_matches(p, s) == ref_ok(s));
      matched += ref_ok(s);
    }
    for (int k = 0; k < 300; k++) {
      const std::string s = draw(p, rng);
      INFO(s);
      REQUIRE(ref_ok(s));
      REQUIRE(pattern_matches(p, s));
    }
    // The fewest characters to a match, from the start.
    int shortest = kInf;
    for (int k = 0; k < 2000; k++) {
      std::string s;
      for (int n = static_cast<int>(rng() % 7); n > 0; n--) s += alphabet[rng() % alphabet.size()];
      if (ref_ok(s)) shortest = std::min(shortest, static_cast<int>(s.size()));
    }
    CHECK(p.chars_needed(p.start()) <= shortest);
    (void)matched;
  }
  CHECK(compile_pattern("^(ab|cd)+e?$", "").chars_needed(1) == 2);
  CHECK(compile_pattern("^([a-c]d|e){2}$", "").chars_needed(1) == 2);
  CHECK(compile_pattern("^x(y(z|a)*)?$", "").chars_needed(1) == 1);
  CHECK(compile_pattern("^(a{3}|b{2})c$", "").chars_needed(1) == 3);
}

TEST_CASE("formats generate only valid strings of their format") {
  // Every string drawn from a format's pattern, checked by an independent test of the format.
  std::mt19937 rng(9);
  auto num = [](const std::string& s, std::size_t at, std::size_t n) {
    return std::stoi(s.substr(at, n));
  };
  auto days_in = [](int y, int m) {
    static const int d[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0) ? 29 : d[m - 1];
  };
  auto date_ok = [&](const std::string& s) {
    if (s.size() != 10 || s[4] != '-' || s[7] != '-') return false;
    const int y = num(s, 0, 4), m = num(s, 5, 2), d = num(s, 8, 2);
    return y >= 1 && m >= 1 && m <= 12 && d >= 1 && d <= days_in(y, m);
  };
  const std::regex time_re(
      "([0-9]{2}):([0-9]{2}):([0-9]{2})(\\.[0-9]+)?(Z|[+-]([0-9]{2}):([0-9]{2}))");
  auto time_ok = [&](const std::string& s) {
    std::smatch m;
    if (!std::regex_match(s, m, time_re)) return false;
    if (std::stoi(m[1]) > 23 || std::stoi(m[2]) > 59 || std::stoi(m[3]) > 59) return false;
    return m[6].length() == 0 || (std::stoi(m[6]) <= 23 && std::stoi(m[7]) <= 59);
  };
  auto ipv4_ok = [](const std::string& s) {
    int parts = 0;
    std::size_t i = 0;
    while (i <= s.size()) {
      const std::size_t j = std::min(s.find('.', i), s.size());
      const std::string o = s.substr(i, j - i);
      if (o.empty() || o.size() > 3 || (o.size() > 1 && o[0] == '0') ||
          o.find_first_not_of("0123456789") != std::string::npos || std::stoi(o) > 255)
        return false;
      parts++, i = j + 1;
    }
    return parts == 4;
  };
  const std::regex uuid_re(
      "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}");
  const std::regex ipv6_re("[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){7}");
  const std::regex email_re("[^@\\s]+@[^@\\s.]+(\\.[^@\\s.]+)+");
  const std::regex uri_re("[a-zA-Z][a-zA-Z0-9+.-]*://[^/?#\\s]+(/[^?#\\s]*)?");
  struct Case {
    const char* name;
    std::function<bool(const std::string&)> ok;
  };
  const Case cases[] = {
      {"date", date_ok},
      {"time", time_ok},
      {"date-time",
       [&](const std::string& s) {
         return s.size() > 11 && s[10] == 'T' && date_ok(s.substr(0, 10)) && time_ok(s.substr(11));
       }},
      {"email", [&](const std::string& s) { return std::regex_match(s, email_re); }},
      {"uuid", [&](const std::string& s) { return std::regex_match(s, uuid_re); }},
      {"ipv4", ipv4_ok},
      {"ipv6", [&](const std::string& s) { return std::regex_match(s, ipv6_re); }},
      {"uri", [&](const std::string& s) { return std::regex_match(s, uri_re); }},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    const char* re = format_pattern(c.name);
    REQUIRE(re != nullptr);
    const Pattern p = compile_pattern(re, "");
    for (int k = 0; k < 500; k++) {
      const std::string s = draw(p, rng);
      INFO(s);
      REQUIRE(c.ok(s));
    }
  }
  // And through a schema: the matcher takes a valid one and refuses an invalid one.
  CHECK(fits(json::parse(R"j({"type": "string", "format": "date"})j"), R"j("2024-02-28")j"));
  CHECK_FALSE(fits(json::parse(R"j({"type": "string", "format": "date"})j"), R"j("2024-02-30")j"));
  CHECK(fits(json::parse(R"j({"type": "string", "format": "ipv4"})j"), R"j("192.168.0.255")j"));
  CHECK_FALSE(
      fits(json::parse(R"j({"type": "string", "format": "ipv4"})j"), R"j("192.168.0.256")j"));
  CHECK(fits(json::parse(R"j({"type": "string", "format": "date-time"})j"),
             R"j("2026-11-27T22:30:00.5+01:00")j"));
}

TEST_CASE("the matcher takes valid texts and refuses the others") {
  CHECK(fits(kPerson, R"j({"name":"Ada","age":36})j"));
  CHECK(fits(kPerson, R"j({"age": 36, "name": "Ada"})j"));              // any order, one space
  CHECK_FALSE(fits(kPerson, R"j({"name":"Ada"})j"));                    // age is required
  CHECK_FALSE(fits(kPerson, R"j({"name":"Ada","age":36,"x":1})j"));     // no other keys
  CHECK_FALSE(fits(kPerson, R"j({"name":"Adalbertina!","age":36})j"));  // 12 > maxLength 10
  CHECK(fits(kPerson, R"j({"name":"Zoë Ü","age":-7})j"));               // characters, not bytes
  CHECK_FALSE(fits(kPerson, R"j({"name":"Ada","age":3.5})j"));
  CHECK_FALSE(fits(kPerson, R"j({"name":"Ada","age":036})j"));
  CHECK_FALSE(fits(kPerson, R"j({"name":"Ada","name":"Bo","age":1})j"));  // once each
  CHECK_FALSE(fits(kPerson, R"j({  "name":"Ada","age":1})j"));

  const json nums = {
      {"type", "array"}, {"items", {{"type", "number"}}}, {"minItems", 1}, {"maxItems", 3}};
  CHECK(fits(nums, "[0.5,-1e-3, 2E+10]"));
  CHECK_FALSE(fits(nums, "[]"));
  CHECK_FALSE(fits(nums, "[1,2,3,4]"));
  CHECK_FALSE(fits(nums, "[1.]"));
  CHECK_FALSE(fits(nums, "[-]"));

  const json range = {{"type", "integer"}, {"minimum", 18}, {"exclusiveMaximum", 130}};
  CHECK(fits(range, "18"));
  CHECK(fits(range, "129"));
  CHECK_FALSE(fits(range, "130"));
  CHECK_FALSE(fits(range, "17"));
  CHECK_FALSE(fits(range, "-20"));
  CHECK_FALSE(fits(range, "1300"));

  const json strs = json::parse(R"j({"type": "object", "properties": {
      "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3,4}$"},
      "tag": {"enum": ["red", "green", 3, null]},
      "note": {"type": ["string", "null"], "minLength": 2}},
    "required": ["code"], "additionalProperties": false})j");
  CHECK(fits(strs, R"j({"code":"AB-123"})j"));
  CHECK(fits(strs, R"j({"tag":3,"code":"AB-1234","note":null})j"));
  CHECK(fits(strs, R"j({"code":"AB-123","note":"\u00e9\n\"q"})j"));
  CHECK_FALSE(fits(strs, R"j({"code":"AB-12"})j"));
  CHECK_FALSE(fits(strs, R"j({"code":"ab-123"})j"));
  CHECK_FALSE(fits(strs, R"j({"code":"AB-123","tag":"blue"})j"));
  CHECK_FALSE(fits(strs, R"j({"code":"AB-123","note":"x"})j"));
  CHECK_FALSE(fits(strs, R"j({"code":"AB-123","note":"\ud800"})j"));
  CHECK_FALSE(fits(strs, "{\"code\":\"AB-123\",\"note\":\"a\x01\"}"));
  CHECK_FALSE(fits(strs, "{\"code\":\"AB-123\",\"note\":\"\xc3\"}"));

  // Recursion through $defs, anyOf, an unanchored pattern, additional keys, any JSON.
  const json tree = json::parse(R"j({"$defs": {"node": {"type": "object",
      "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v"]}}, "$ref": "#/$defs/node"})j");
  CHECK(fits(tree, R"j({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})j"));
  CHECK_FALSE(fits(tree, R"j({"v":1,"kids":[{}]})j"));
  // oneOf with alternatives of disjoint types, through $ref and const too.
  const json one = json::parse(R"j({"$defs": {"n": {"type": "integer", "minimum": 0}},
      "oneOf": [{"type": "string", "maxLength": 3}, {"type": "null"}, {"$ref": "#/$defs/n"},
                {"const": true}]})j");
  for (const char* ok : {R"j("ab")j", "null", "5", "true"}) CHECK(fits(one, ok));
  for (const char* no : {R"j("abcd")j", "-5", "false", "[]", "1.5"}) CHECK_FALSE(fits(one, no));
  // prefixItems: an item schema per leading position, then items (false: none).
  const json tuple = json::parse(R"j({"prefixItems": [{"type": "integer"}, {"type": "string"}],
                                      "items": false})j");
  for (const char* ok : {R"j([1,"a"])j", "[1]", "[]"}) CHECK(fits(tuple, ok));
  for (const char* no : {R"j(["a"])j", R"j([1,"a",2])j", "[1,2]"}) CHECK_FALSE(fits(tuple, no));
  const json head = json::parse(R"j({"type": "array", "prefixItems": [{"const": "x"}],
                                     "items": {"type": "integer"}, "minItems": 3})j");
  CHECK(fits(head, R"j(["x",1,2])j"));
  CHECK(fits(head, R"j(["x", 1, 2, 3])j"));
  for (const char* no : {R"j(["x",1])j", "[1,2,3]", R"j(["x","y",1])j"})
    CHECK_FALSE(fits(head, no));
  CHECK(fits(json::parse(R"j({"type": "string", "pattern": "ab"})j"), R"j("xxabyy")j"));
  CHECK_FALSE(fits(json::parse(R"j({"type": "string", "pattern": "ab"})j"), R"j("xxayy")j"));
  const json extra = json::parse(R"j({"type": "object", "properties": {"id": {"type": "integer"}},
      "additionalProperties": {"type": "boolean"}})j");
  CHECK(fits(extra, R"j({"id":1,"ok":true,"x":false})j"));
  CHECK_FALSE(fits(extra, R"j({"id":1,"ok":2})j"));
  CHECK(fits(*any_json_object(), R"j({"a":[1,{"b":null}],"c":"d","e":-0.5e+1})j"));
  CHECK_FALSE(fits(*any_json_object(), R"j([1])j"));
  CHECK(fits(json::object(), "[true,false,null]"));
  CHECK(fits(json::object(), "12"));
}

TEST_CASE("a mask allows exactly the tokens whose bytes keep the text valid") {
  const auto g = compile_json_schema(json::parse(R"j({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 4},
      "kind": {"enum": ["cat", "dog"]},
      "n": {"type": "integer", "maximum": 50}, "x": {"type": "number"}},
    "required": ["name"]})j"));
  const auto v = Vocab::of(tok(), tok().vocab_size(), tok().eos_id());
  Constraint c(g, v);
  Matcher m(*g);
  // Walk a text, and at each of these prefixes compare the mask with feeding every token.
  const std::string text = R"j({"name": "Bo", "n": 42, "x": 0.5, "kind": "dog"})j";
  State s, n;
  m.start(s);
  int checked = 0;
  for (std::size_t i = 0; i <= text.size(); i++) {
    if (i % 3 == 0 || i + 1 >= text.size()) {
      const auto& words = c.mask(kInf);
      std::vector<uint32_t> want;
      int unused = 0;
      const int allowed = brute_mask(m, *v, s, kInf, want, unused);
      long differ = 0;
      for (int32_t id = 0; id < v->V; id++)
        differ += ((want[id >> 5] >> (id & 31)) & 1) != ((words[id >> 5] >> (id & 31)) & 1);
      INFO("after " << text.substr(0, i));
      CHECK(differ == 0);
      CHECK(allowed > 0);
      checked++;
    }
    if (i == text.size()) break;
    c.advance(-2, text.substr(i, 1));
    m.feed(s, static_cast<uint8_t>(text[i]), n);
    std::swap(s, n);
  }
  CHECK(checked > 10);
  CHECK(c.accepts());
  CHECK(c.complete());
  // Strings: a multi-byte token may close the string and go on ("} or ",).
  Constraint d(g, v);
  d.advance(-2, R"j({"name":"B)j");
  const auto& w = d.mask(kInf);
  for (const char* t : {"\",", "\"}", "o", "ob"}) {
    const auto ids = tok().encode(t);
    REQUIRE(ids.size() == 1);
    CHECK((w[ids[0] >> 5] >> (ids[0] & 31) & 1));
  }
}

TEST_CASE("masks equal feeding every token, along random texts of every schema of the corpus",
          "[corpus]") {
  // Strings take their precomputed tokens (string_tokens.hpp), the rest walk the trie: both
  // against the brute force, with and without a budget, in strings of bounded and free length,
  // keys, numbers and structure.
  std::ifstream in(std::filesystem::path(SERVEKIT_SOURCE_TESTS) / "constrain" / "schemas.json");
  REQUIRE(in);
  json corpus = json::parse(in);
  // And shapes the corpus does not have yet: prefixItems (with a required tail) and oneOf.
  corpus.push_back(json::parse(R"j({"type": "array", "prefixItems": [{"type": "integer"},
      {"enum": ["a", "bc"]}, {"type": "string", "maxLength": 3}], "items": {"type": "boolean"},
      "minItems": 4})j"));
  corpus.push_back(json::parse(R"j({"oneOf": [{"type": "string", "minLength": 2},
      {"type": "array", "prefixItems": [{"type": "null"}], "items": false}, {"const": 7}]})j"));
  const auto v = Vocab::of(tok(), tok().vocab_size(), tok().eos_id());
  std::mt19937 rng(11);
  int points = 0, in_strings = 0, in_patterns = 0;
  for (std::size_t k = 0; k < corpus.size(); k++) {
    std::shared_ptr<const Grammar> g;
    try {
      g = compile_json_schema(corpus[k]);
    } catch (const Error&) {
      continue;
    }
    Matcher m(*g);
    MaskMaker maker(*g, *v);
    State s, n;
    m.start(s);
    for (int step = 0; step < 16 && !m.complete(s); step++) {
      const int fin = m.min_finish(s);
      for (int budget : {kInf, fin + 1 + static_cast<int>(rng() % 3)}) {
        std::vector<uint32_t> want;
        int want_fin = 0;
        const int want_n = brute_mask(m, *v, s, budget, want, want_fin);
        const MaskEntry got = maker.make(s, budget);
        INFO("schema " << k << " step " << step << " budget " << budget);
        REQUIRE(got.words == want);
        CHECK(got.allowed == want_n);
        CHECK(got.max_fin >= want_fin);
        points++;
      }
      for (int i = 0; i < s.size; i++) {
        const Node& nd = g->nodes[s.t[i].top().node];
        in_strings += nd.kind == Kind::String;
        in_patterns += nd.kind == Kind::String && nd.pattern >= 0;
      }
      // The next token: half the time one that leaves a string or a value (a quote or a
      // delimiter in it), so that the walk gets past long strings.
      std::vector<uint32_t> words;
      int unused = 0;
      brute_mask(m, *v, s, kInf, words, unused);
      std::vector<int32_t> any, leaving;
      for (int32_t id = 0; id < v->V; id++)
        if (id != v->eos && (words[id >> 5] >> (id & 31) & 1)) {
          any.push_back(id);
          if (tok().token_view(id).find_first_of("\",:}]") != std::string_view::npos)
            leaving.push_back(id);
        }
      if (any.empty()) break;
      const auto& pick = !leaving.empty() && rng() % 2 ? leaving : any;
      const int32_t id = pick[rng() % pick.size()];
      for (char ch : tok().token_view(id)) {
        m.feed(s, static_cast<uint8_t>(ch), n);
        std::swap(s, n);
      }
      REQUIRE(!s.dead());
    }
  }
  CHECK(points > 300);
  INFO(points << " points, " << in_strings << " threads in strings, " << in_patterns
              << " in patterns");
  CHECK(in_strings > 40);
  CHECK(in_patterns > 8);
}

TEST_CASE("regex and choice constraints: masks equal feeding every token, texts match") {
  // Whole texts (not JSON): a regex over ASCII with quotes and newlines, and a choice among
  // fixed texts, generated through the masks with a budget that forces an end; the masks
  // against the brute force on the way, each text against std::regex (ECMAScript).
  const auto v = Vocab::of(tok(), tok().vocab_size(), tok().eos_id());
  std::mt19937 rng(21);
  const char* res[] = {
      "\\d{3}-\\d{4}", "(yes|no)\\n",     "[A-Z][a-z]+( [A-Z][a-z]+)*", "\\{\"a\": (true|false)\\}",
      ".{3,6}!",       "[^x]+\\.(txt|md)"};
  int points = 0;
  auto generate = [&](const std::shared_ptr<const Grammar>& g, int budget) {
    Constraint c(g, v);
    Matcher m(*g);
    MaskMaker maker(*g, *v);
    State s, n;
    m.start(s);
    std::string text;
    for (int used = 0; used < budget; used++) {
      const int left = budget - used;
      const auto& words = c.mask(left);
      std::vector<uint32_t> want;
      int want_fin = 0;
      brute_mask(m, *v, s, left, want, want_fin);
      if (want != std::vector<uint32_t>(v->words(), 0)) {  // the budget can still be met
        REQUIRE(words == want);
        points++;
      }
      const int32_t id = pick(words, v->V, rng);
      if (id == v->eos) break;
      c.advance(id, tok().token_view(id));
      for (char ch : tok().token_view(id)) {
        m.feed(s, static_cast<uint8_t>(ch), n);
        std::swap(s, n);
      }
      text += tok().token_view(id);
    }
    REQUIRE(c.accepts());
    return text;
  };
  for (const char* re : res) {
    INFO(re);
    const auto g = compile_regex(re);
    const std::regex ref(re, std::regex::ECMAScript);
    for (int k = 0; k < 4; k++) {
      const std::string text = generate(g, 12 + 4 * k);
      INFO(text);
      CHECK(std::regex_match(text, ref));
    }
  }
  const std::vector<std::string> choices = {"yes", "no", "maybe later", "n/a"};
  const auto g = compile_choice(choices);
  for (int k = 0; k < 12; k++) {
    const std::string text = generate(g, 6);
    INFO(text);
    CHECK(std::find(choices.begin(), choices.end(), text) != choices.end());
  }
  CHECK(points > 50);
  auto error = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  CHECK_THAT(error([] { compile_regex("(|)*"); }), Catch::Contains("only the empty text"));
  CHECK_THAT(error([] { compile_regex("a(b"); }),
             Catch::Contains("regex \"a(b\"") && Catch::Contains("unterminated group"));
  CHECK_THAT(error([] { compile_choice({}); }), Catch::Contains("choice: the list"));
  CHECK_THAT(error([] { compile_choice({"a", ""}); }), Catch::Contains("choice 1 is empty"));
}

TEST_CASE("prefixItems and oneOf under a budget: every text ends complete and fits") {
  // min_finish must never promise less than the grammar can keep: random texts through
  // budgeted masks, budgets from just enough upward.
  const json schemas[] = {json::parse(R"j({"type": "array", "prefixItems": [{"type": "integer"},
          {"type": "string", "minLength": 4}], "items": {"enum": ["yes", "no"]},
          "minItems": 5})j"),
                          json::parse(R"j({"type": "object", "properties": {"v": {"oneOf": [
          {"type": "array", "prefixItems": [{"type": "string", "minLength": 3}], "items": false,
           "minItems": 1}, {"type": "integer", "minimum": 100}]}}, "required": ["v"]})j")};
  const auto v = Vocab::of(tok(), tok().vocab_size(), tok().eos_id());
  std::mt19937 rng(17);
  for (const json& schema : schemas) {
    const auto g = compile_json_schema(schema);
    Matcher m(*g);
    State s0;
    m.start(s0);
    const int need = m.min_finish(s0);
    for (int run = 0; run < 30; run++) {
      const int budget = need + 1 + run;
      Constraint c(g, v);
      const std::string text = budget_walk(c, budget, rng);
      INFO(schema.dump() << "\nbudget " << budget << ": " << text);
      REQUIRE(c.accepts());
      CHECK(fits(schema, text));
    }
  }
}

TEST_CASE("with a budget the mask closes open structures in time, and never strands a text") {
  const auto g = compile_json_schema(json::parse(R"j({"type": "object", "properties": {
      "items": {"type": "array", "items": {"type": "object", "properties": {
         "s": {"type": "string", "minLength": 3}, "t": {"type": "boolean"}}, "required": ["s"]}},
      "z": {"type": "integer", "minimum": 1000}},
    "required": ["items", "z"]})j"));
  const auto v = Vocab::of(tok(), tok().vocab_size(), tok().eos_id());
  std::mt19937 rng(7);
  int completed = 0;
  for (int run = 0; run < 40; run++) {
    Constraint c(g, v);
    const int budget = 30 + run;
    std::string text;
    int used = 0;
    while (used < budget && !c.complete()) {
      const auto& words = c.mask(budget - used);
      std::vector<int32_t> ok;
      for (int32_t id = 0; id < v->V; id++)
        if (words[id >> 5] >> (id & 31) & 1) ok.push_back(id);
      REQUIRE(!ok.empty());
      const int32_t id = ok[std::uniform_int_distribution<size_t>(0, ok.size() - 1)(rng)];
      used++;
      if (id == v->eos) {
        c.advance(id, "");
        break;
      }
      c.advance(id, tok().token_view(id));
      text += tok().token_view(id);
    }
    INFO(text);
    REQUIRE(c.accepts());
    const json j = json::parse(text);
    CHECK(j["z"].get<int64_t>() >= 1000);
    for (const auto& it : j["items"]) CHECK(it["s"].get<std::string>().size() >= 3);
    completed++;
  }
  CHECK(completed == 40);
}
