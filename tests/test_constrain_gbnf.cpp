// SPDX-License-Identifier: Apache-2.0
// GBNF grammars (constrain/gbnf.hpp): the matcher against a reference acceptor written
// separately over the same rules (the set of ends each node reaches from each position, a
// memoised recursive descent), on texts drawn from the grammars and on those texts mutated;
// the masks against feeding every token on its own, with a budget; and the compiler's errors.
#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>

#include "constrain_helpers.hpp"
#include "servekit/constrain/gbnf.hpp"
#include "servekit/constrain/token_mask.hpp"

using namespace servekit;
using namespace servekit::constrain;
using namespace constrain_test;

namespace {

// The positions j where text[i, j) is a text of node n.
class Reference {
 public:
  Reference(const Grammar& g, std::string_view text) : g_(g), t_(text) {}
  bool accepts() { return ends(g_.nodes[g_.root].items, 0).count(static_cast<int>(t_.size())); }

  std::set<int> ends(int n, int i) {
    const auto key = std::make_pair(n, i);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    memo_[key] = {};  // a rule met again at the same place adds nothing (no left recursion)
    const Node& nd = g_.nodes[n];
    std::set<int> out;
    const int size = static_cast<int>(t_.size());
    switch (nd.kind) {
      case Kind::Chars:
        if (i < size && nd.has_byte(static_cast<uint8_t>(t_[i]))) out.insert(i + 1);
        break;
      case Kind::Literal:
        for (const auto& s : nd.texts)
          if (t_.substr(i, s.size()) == s) out.insert(i + static_cast<int>(s.size()));
        break;
      case Kind::AnyOf:
        for (int a : nd.alts)
          for (int j : ends(a, i)) out.insert(j);
        break;
      case Kind::Seq: {
        std::set<int> cur{i};
        for (int e : nd.alts) {
          std::set<int> next;
          for (int p : cur)
            for (int j : ends(e, p)) next.insert(j);
          cur = std::move(next);
        }
        out = cur;
        break;
      }
      case Kind::Repeat: {
        std::set<int> cur{i};
        if (nd.min_items == 0) out.insert(i);
        for (long k = 1; k <= nd.max_items && !cur.empty() && k <= size + nd.min_items + 1; k++) {
          std::set<int> next;
          for (int p : cur)
            for (int j : ends(nd.items, p)) next.insert(j);
          cur = std::move(next);
          if (k >= nd.min_items) out.insert(cur.begin(), cur.end());
        }
        break;
      }
      default:
        FAIL("a node kind GBNF does not make");
    }
    memo_[key] = out;
    return out;
  }

 private:
  const Grammar& g_;
  std::string_view t_;
  std::map<std::pair<int, int>, std::set<int>> memo_;
};

bool reference_fits(const Grammar& g, std::string_view text) {
  return Reference(g, text).accepts();
}

// A random text of node n; past `depth` levels of rules, the shortest alternatives.
void derive(const Grammar& g, int n, int depth, std::mt19937& rng, std::string& out) {
  const Node& nd = g.nodes[n];
  switch (nd.kind) {
    case Kind::Chars: {
      std::vector<int> bytes;
      for (int b = 0; b < 256; b++)
        if (nd.has_byte(b) && (b >= 0x80 || (b >= 0x20 && b < 0x7F) || b == '\n'))
          bytes.push_back(b);
      if (bytes.empty())
        for (int b = 0; b < 256; b++)
          if (nd.has_byte(b)) bytes.push_back(b);
      out += static_cast<char>(bytes[rng() % bytes.size()]);
      return;
    }
    case Kind::Literal:
      out += nd.texts[rng() % nd.texts.size()];
      return;
    case Kind::AnyOf: {
      int a = nd.alts[rng() % nd.alts.size()];
      if (depth <= 0)
        for (int x : nd.alts)
          if (g.min_len[x] < g.min_len[a]) a = x;
      return derive(g, a, depth - 1, rng, out);
    }
    case Kind::Seq:
      for (int e : nd.alts) derive(g, e, depth, rng, out);
      return;
    case Kind::Repeat: {
      const int hi = std::min(nd.max_items, nd.min_items + (depth > 0 ? 3 : 0));
      const int k = nd.min_items + static_cast<int>(rng() % (hi - nd.min_items + 1));
      for (int i = 0; i < k; i++) derive(g, nd.items, depth, rng, out);
      return;
    }
    default:
      FAIL("a node kind GBNF does not make");
  }
}

const char* const kArithmetic = R"G(root ::= expr
expr ::= term (ws [-+*/] ws term)*
term ::= [0-9]+ | "(" ws expr ws ")"   # recursion through a group
ws   ::= " "?
)G";

// llama.cpp's grammars/json.gbnf, as it is written there.
const char* const kJson = R"G(root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
)G";

// Its earlier version: strings as ranges of code points up to U+10FFFF.
const char* const kJsonOld = R"G(root  ::= object
value ::= object | array | string | number | boolean
object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}"
array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]"
string  ::=
  "\"" (
    [\x20\x21\x23-\x5b\x5d-\U0010FFFF] | # any code point except " (\x22) and \ (\x5c)
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F]) # escapes
  )* "\""
number  ::= "-"? [0-9]+ ws
boolean ::= ("true" | "false") ws
ws ::= ([ \t\n] ws)?
)G";

const char* const kUtf8 = R"G(root ::= "«" [a-zé]+ "»" | [^a-z]{2,3} | "x" . "x")G";
const char* const kNested = "root ::= p+\np ::= \"(\" p* \")\" | \"[\" \"]\"\n";

}  // namespace

TEST_CASE("GBNF: the matcher takes what the reference acceptor takes, on drawn and mutated texts",
          "[gbnf]") {
  std::mt19937 rng(7);
  int valid = 0, mutated_in = 0, mutated_out = 0;
  for (const char* src : {kArithmetic, kJson, kJsonOld, kUtf8, kNested}) {
    INFO(src);
    const auto g = compile_gbnf(src);
    for (int k = 0; k < 150; k++) {
      std::string text;
      derive(*g, g->nodes[g->root].items, 3, rng, text);
      INFO("drawn: " << text);
      REQUIRE(reference_fits(*g, text));
      REQUIRE(fits(*g, text));
      valid++;
      // Every prefix stays alive and can be finished in no more bytes than the text has left.
      Matcher m(*g);
      State s, n;
      m.start(s);
      for (std::size_t i = 0; i < text.size(); i++) {
        REQUIRE(m.min_finish(s) <= static_cast<int>(text.size() - i));
        m.feed(s, static_cast<uint8_t>(text[i]), n);
        std::swap(s, n);
        REQUIRE_FALSE(s.dead());
      }
      for (int j = 0; j < 6; j++) {
        std::string t = text;
        const std::size_t at = t.empty() ? 0 : rng() % t.size();
        const char pool[] = "0123456789+-*/() []{}\",:aex\\\n";
        const char c = pool[rng() % (sizeof pool - 1)];
        if (j % 3 == 0 && !t.empty())
          t.erase(at, 1);
        else if (j % 3 == 1)
          t.insert(at, 1, c);
        else if (!t.empty())
          t[at] = c;
        INFO("mutated: " << t);
        const bool want = reference_fits(*g, t);
        CHECK(fits(*g, t) == want);
        (want ? mutated_in : mutated_out)++;
      }
    }
  }
  CHECK(valid == 750);
  CHECK(mutated_in > 100);
  CHECK(mutated_out > 500);
}

// UTF-8 by hand, for the checks of classes of code points.
std::string utf8(uint32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | c >> 6), s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | c >> 12), s += static_cast<char>(0x80 | (c >> 6 & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | c >> 18), s += static_cast<char>(0x80 | (c >> 12 & 0x3F));
    s += static_cast<char>(0x80 | (c >> 6 & 0x3F)), s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

TEST_CASE("GBNF: classes take characters, not bytes: each code point in range and no other",
          "[gbnf]") {
  struct Case {
    const char* src;
    std::vector<std::pair<uint32_t, uint32_t>> in;  // the ranges the class takes
  };
  const Case cases[] = {
      {"root ::= [\\u00e9-\\u4e00\\U0001F600-\\U0001F64F]", {{0xE9, 0x4E00}, {0x1F600, 0x1F64F}}},
      {"root ::= [α-ω]", {{0x3B1, 0x3C9}}},
      {"root ::= [^a-z\\u0800-\\uFFFF]", {{0, 0x60}, {0x7B, 0x7FF}, {0x10000, 0x10FFFF}}},
      {"root ::= .", {{0, 0x10FFFF}}},
      {"root ::= [\\x7f-\\U00010000]", {{0x7F, 0x10000}}}};
  std::mt19937 rng(5);
  const uint32_t edges[] = {0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF};
  for (const Case& c : cases) {
    INFO(c.src);
    const auto g = compile_gbnf(c.src);
    std::vector<uint32_t> points(std::begin(edges), std::end(edges));
    for (const auto& [a, b] : c.in)
      for (uint32_t d : {0u, 1u}) points.push_back(a + d), points.push_back(b - d);
    for (int k = 0; k < 3000; k++) points.push_back(rng() % 0x110000);
    for (uint32_t p : points) {
      if (p == 0 || (p >= 0xD800 && p <= 0xDFFF) || p > 0x10FFFF) continue;
      bool in = false;
      for (const auto& [a, b] : c.in) in |= p >= a && p <= b;
      INFO("U+" << std::hex << p);
      CHECK(fits(*g, utf8(p)) == in);
    }
    CHECK_FALSE(fits(*g, "\xED\xA0\x80"));  // a surrogate's bytes: not UTF-8
    CHECK_FALSE(fits(*g, "\xC0\x80"));      // an overlong form
  }
}

TEST_CASE("GBNF: masks equal feeding every token, and texts drawn through them fit", "[gbnf]") {
  const auto v = Vocab::of(tok(), tok().vocab_size(), tok().eos_id());
  std::mt19937 rng(11);
  int points = 0;
  for (const char* src : {kArithmetic, kJson, kJsonOld, kUtf8, kNested}) {
    INFO(src);
    const auto g = compile_gbnf(src);
    for (int k = 0; k < 4; k++) {
      const int budget = 10 + 6 * k;
      Constraint c(g, v);
      Matcher m(*g);
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
      INFO(text);
      if (c.accepts()) CHECK(reference_fits(*g, text));
    }
  }
  CHECK(points > 40);
}

TEST_CASE("GBNF: a grammar the compiler cannot take is an error naming the place and why",
          "[gbnf]") {
  auto error = [](const std::string& src) -> std::string {
    try {
      compile_gbnf(src);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  using Catch::Contains;
  CHECK_THAT(error("start ::= \"a\""), Contains("no rule named \"root\""));
  CHECK_THAT(error("root ::= item\n"), Contains("rule \"item\" is used but never defined"));
  CHECK_THAT(error("root ::= \"a\"\nroot ::= \"b\""),
             Contains("line 2, column 1") && Contains("defined twice"));
  CHECK_THAT(error("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\""),
             Contains("left recursion") && Contains("expr"));
  CHECK_THAT(error("root ::= \"a\" x\nx ::= \"a\" x"), Contains("never ends"));
  CHECK_THAT(error("root ::= \"abc"), Contains("line 1, column 10") && Contains("does not end"));
  CHECK_THAT(error("root ::= [a-"), Contains("not closed"));
  CHECK_THAT(error("root ::= \"a\" {2,1}"), Contains("maximum below its minimum"));
  CHECK_THAT(error("root ::= \"\\q\""), Contains("unknown escape \\q"));
  CHECK_THAT(error("root ::= [^\\x00-\\U0010FFFF]"), Contains("takes no character"));
  CHECK_THAT(error("root ::="), Contains("only the empty text"));
  CHECK_THAT(error("root ::= \"\" | e*\ne ::= \"\""), Contains("only the empty text"));
  CHECK_THAT(error("root = \"a\""), Contains("expected ::="));
  CHECK_THAT(error("root ::= (\"a\" | \"b\""), Contains("not closed"));
  CHECK_THAT(error("root ::= \"a\" )"), Contains("expected the end of rule \"root\""));
  CHECK(error(kJson).empty());
  // Texts of a compiled grammar: what the rules say, no more.
  const auto g = compile_gbnf(kArithmetic);
  CHECK(fits(*g, "12 + (3*4)"));
  CHECK_FALSE(fits(*g, "12 +"));
  CHECK_FALSE(fits(*g, "(1"));
  CHECK(fits(*compile_gbnf(kUtf8), "«abé»"));
  CHECK(fits(*compile_gbnf(kUtf8), "x€x"));
  CHECK_FALSE(fits(*compile_gbnf(kUtf8), "«»x"));
  CHECK(fits(*compile_gbnf("root ::= \"a\" * \"b\"  # a postfix after a space"), "aab"));
}
