// SPDX-License-Identifier: Apache-2.0
#pragma once
// A JSON schema compiled into the graph of value shapes the matcher walks byte by byte
// (constrain/matcher.hpp). The supported subset is the one people use for structured output:
//
//   object      properties, required, additionalProperties (false or absent: only the listed
//               keys; true or a schema: other keys too), keys in any order
//   array       items, minItems, maxItems
//   string      minLength, maxLength (characters), pattern (see Pattern), enum, const
//   integer     minimum, maximum, exclusiveMinimum, exclusiveMaximum
//   number, boolean, null
//   enum, const of any JSON value; anyOf; allOf of one schema; type as a list; local $ref
//   (#/$defs/..., #/definitions/...), recursive ones too
//   {} or {"type": "json_object"}: any JSON value / any object
//
// Annotations (title, description, default, examples, $schema, $id, $comment) are ignored;
// any other keyword is an error that names it and where it is, never silently dropped. Like
// xgrammar's strict mode and outlines, an object without additionalProperties gets only its
// listed keys: the output is still valid, and a model cannot wander into made-up keys.
//
// Text is written compactly: no whitespace except at most one space after ':' and ','.
// Strings are UTF-8; escapes are JSON's; the number of digits is bounded (integers 18,
// numbers 15 + 15 and a 2-digit exponent) so that every value has an end.
#include <algorithm>
#include <cmath>
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "servekit/core/error.hpp"
#include "servekit/core/json_brief.hpp"

namespace servekit::constrain {

enum class Kind : uint8_t { Root, Object, Array, String, Integer, Number, Literal, AnyOf };

inline constexpr int kInf = std::numeric_limits<int>::max() / 4;

// A string pattern: a sequence of character classes, each once, optional, or repeated; no
// groups or alternation. Its characters are printable ASCII other than '"' and '\', so that a
// matching string is written without escapes. States are sets of positions (bit i: the next
// atom to match is i; bit n: matched), at most 63 atoms after {m,n} is expanded.
struct Pattern {
  struct Atom {
    std::array<uint64_t, 2> set{};  // ASCII characters it matches
    bool optional = false, loop = false;
  };
  std::vector<Atom> atoms;
  std::vector<int> need;  // (n + 1) mandatory atoms from position i to the end

  int n() const { return static_cast<int>(atoms.size()); }
  uint64_t closure(uint64_t s) const {
    for (int i = 0; i < n(); i++)
      if ((s >> i & 1) && atoms[i].optional) s |= uint64_t(1) << (i + 1);
    return s;
  }
  uint64_t start() const { return closure(1); }
  uint64_t step(uint64_t s, uint8_t c) const {
    if (c >= 128) return 0;
    uint64_t t = 0;
    for (int i = 0; i < n(); i++)
      if ((s >> i & 1) && (atoms[i].set[c >> 6] >> (c & 63) & 1)) {
        t |= uint64_t(1) << (i + 1);
        if (atoms[i].loop) t |= uint64_t(1) << i;
      }
    return closure(t);
  }
  bool accepts(uint64_t s) const { return s >> n() & 1; }
  int chars_needed(uint64_t s) const {
    int best = kInf;
    for (int i = 0; i <= n(); i++)
      if (s >> i & 1) best = std::min(best, need[i]);
    return best;
  }
};

struct Property {
  std::string key;  // as written, quotes included: "name"
  int value;        // node
};

struct Node {
  Kind kind = Kind::Root;
  // Object
  std::vector<Property> props;
  uint64_t required = 0;  // bit i: props[i]
  int additional = -1;    // node of other keys' values; -1: none allowed
  // Array
  int items = -1, min_items = 0, max_items = kInf;
  // String
  int min_len = 0, max_len = kInf, pattern = -1;
  // Integer: the closed range
  int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  // Literal: the texts (enum, const, true, false, null); AnyOf: the alternatives
  std::vector<std::string> texts;
  std::vector<int> alts;

  bool bounded() const {
    return lo != std::numeric_limits<int64_t>::min() || hi != std::numeric_limits<int64_t>::max();
  }
  // The count a string's state keeps: past this, more characters change nothing.
  int len_cap() const { return max_len < kInf ? max_len : min_len; }
};

// Masks cached per matcher state, per vocabulary (constrain/token_mask.hpp fills it).
struct MaskCacheSlot;

class Grammar {
 public:
  std::vector<Node> nodes;
  std::vector<Pattern> patterns;
  std::vector<int> min_len;  // (nodes) bytes of the shortest text of each node
  int root = 0;              // a Root node
  int key_node = -1;         // any string: the keys of additionalProperties
  std::string source;        // the schema, for messages

  // The mask cache is shared by every request with this grammar (and guarded: engines may
  // share it).
  mutable std::mutex cache_mu;
  mutable std::map<const void*, std::shared_ptr<MaskCacheSlot>> caches;
};

namespace detail {

class Compiler {
 public:
  explicit Compiler(const nlohmann::json& doc) : doc_(doc) {}

  std::shared_ptr<Grammar> run() {
    g_ = std::make_shared<Grammar>();
    g_->source = json_brief(doc_);
    Node root = make(Kind::Root);
    g_->nodes.push_back(root);
    g_->key_node = add(make(Kind::String));
    const int value = compile(doc_, "");
    g_->nodes[0].items = value;
    lengths();
    if (g_->min_len[0] >= kInf)
      fail(
          "json schema: no finite JSON text satisfies it (a required property or item "
          "refers back to itself)");
    return std::move(g_);
  }

 private:
  using json = nlohmann::json;

  static Node make(Kind k) {
    Node n;
    n.kind = k;
    return n;
  }

  int add(Node n) {
    g_->nodes.push_back(std::move(n));
    return static_cast<int>(g_->nodes.size()) - 1;
  }

  [[noreturn]] static void bad(const std::string& at, const std::string& what) {
    fail("json schema: at ", at.empty() ? std::string("/") : at, ": ", what);
  }

  static int64_t as_int(const json& v, const std::string& at, const char* kw) {
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_unsigned())
      return static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX));
    if (v.is_number_float()) {
      const double d = v.get<double>();
      // A double outside int64's range has no conversion (undefined behaviour): refuse it first.
      if (!(d >= -0x1p63 && d < 0x1p63))
        bad(at, std::string("'") + kw + "' is out of range, got " + json_brief(v));
      if (d == std::trunc(d)) return static_cast<int64_t>(d);
    }
    bad(at, std::string("'") + kw + "' must be an integer, got " + json_brief(v));
  }
  static int as_count(const json& v, const std::string& at, const char* kw) {
    const int64_t n = as_int(v, at, kw);
    if (n < 0) bad(at, std::string("'") + kw + "' must be >= 0, got " + json_brief(v));
    return static_cast<int>(std::min<int64_t>(n, kInf));
  }

  int literals(std::vector<std::string> texts) {
    Node n = make(Kind::Literal);
    n.texts = std::move(texts);
    return add(std::move(n));
  }

  int any_value() {
    if (any_ >= 0) return any_;
    // Any JSON value: object (any keys), array, string, number, true/false/null.
    Node alt = make(Kind::AnyOf);
    any_ = add(alt);
    Node obj = make(Kind::Object);
    obj.additional = any_;
    Node arr = make(Kind::Array);
    arr.items = any_;
    const int o = add(obj), a = add(arr), s = add(make(Kind::String)), n = add(make(Kind::Number));
    const int l = literals({"true", "false", "null"});
    g_->nodes[any_].alts = {o, a, s, n, l};
    return any_;
  }

  int resolve_ref(const std::string& ref, const std::string& at) {
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    if (ref.rfind("#", 0) != 0)
      bad(at, "$ref " + string_brief(ref) + " is not local (only #/... is supported)");
    json::json_pointer ptr;
    try {
      ptr = json::json_pointer(ref.substr(1));
    } catch (const std::exception&) {
      bad(at, "$ref " + string_brief(ref) + " is not a JSON pointer");
    }
    if (!doc_.contains(ptr)) bad(at, "$ref " + string_brief(ref) + " points at nothing");
    // Reserve the node first so that a recursive reference finds it.
    const int id = add(make(Kind::AnyOf));
    refs_[ref] = id;
    const int body = compile(doc_.at(ptr), ref.substr(1));
    g_->nodes[id].alts = {body};
    return id;
  }

  int compile(const json& s, const std::string& at) {
    if (++depth_ > 200) bad(at, "the schema nests more than 200 levels");
    struct Leave {
      int& d;
      ~Leave() { d--; }
    } leave{depth_};
    if (s.is_boolean()) {
      if (!s.get<bool>()) bad(at, "the schema 'false' allows no value");
      return any_value();
    }
    if (!s.is_object()) bad(at, "a schema must be an object or a boolean, got " + json_brief(s));

    // Annotations (is_annotation) and $defs are skipped; these constrain; anything else is
    // refused.
    static const char* known[] = {"type",
                                  "properties",
                                  "required",
                                  "additionalProperties",
                                  "items",
                                  "minItems",
                                  "maxItems",
                                  "minLength",
                                  "maxLength",
                                  "pattern",
                                  "enum",
                                  "const",
                                  "minimum",
                                  "maximum",
                                  "exclusiveMinimum",
                                  "exclusiveMaximum",
                                  "anyOf",
                                  "allOf",
                                  "$ref",
                                  "$defs",
                                  "definitions"};
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      const bool ok = is_annotation(k) ||
                      std::find_if(std::begin(known), std::end(known),
                                   [&](const char* x) { return k == x; }) != std::end(known);
      if (!ok) bad(at, "unsupported keyword " + string_brief(k));
    }
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) bad(at, "$ref must be a string");
      for (const auto& [k, v] : s.items())
        if (k != "$ref" && k != "$defs" && k != "definitions" && !is_annotation(k))
          bad(at, "keyword '" + k + "' beside $ref is not supported");
      return resolve_ref(s["$ref"].get<std::string>(), at);
    }
    if (s.contains("allOf")) {
      const json& a = s["allOf"];
      if (!a.is_array() || a.size() != 1)
        bad(at, "allOf is supported with exactly one schema, got " + json_brief(a));
      if (s.size() > 1)
        for (const auto& [k, v] : s.items())
          if (k != "allOf" && !is_annotation(k))
            bad(at, "keyword '" + k + "' beside allOf is not supported");
      return compile(a[0], at + "/allOf/0");
    }
    if (s.contains("anyOf")) {
      const json& a = s["anyOf"];
      if (!a.is_array() || a.empty())
        bad(at, "anyOf must be a non-empty array of schemas, got " + json_brief(a));
      for (const auto& [k, v] : s.items())
        if (k != "anyOf" && !is_annotation(k))
          bad(at, "keyword '" + k + "' beside anyOf is not supported");
      Node n = make(Kind::AnyOf);
      for (std::size_t i = 0; i < a.size(); i++)
        n.alts.push_back(compile(a[i], at + "/anyOf/" + std::to_string(i)));
      return add(std::move(n));
    }
    if (s.contains("const") || s.contains("enum")) {
      std::vector<std::string> texts;
      if (s.contains("const")) texts.push_back(s["const"].dump());
      if (s.contains("enum")) {
        const json& e = s["enum"];
        if (!e.is_array() || e.empty())
          bad(at, "enum must be a non-empty array, got " + json_brief(e));
        if (s.contains("const")) bad(at, "enum and const together are not supported");
        for (const auto& v : e) texts.push_back(v.dump());
      }
      for (const auto& [k, v] : s.items())
        if (k != "enum" && k != "const" && k != "type" && !is_annotation(k))
          bad(at, "keyword '" + k + "' beside enum/const is not supported");
      std::sort(texts.begin(), texts.end());
      texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
      return literals(std::move(texts));
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string())
        types.push_back(t.get<std::string>());
      else if (t.is_array() && !t.empty())
        for (const auto& x : t) {
          if (!x.is_string()) bad(at, "type must be a string or a list of strings");
          types.push_back(x.get<std::string>());
        }
      else
        bad(at, "type must be a string or a non-empty list of strings, got " + json_brief(t));
    } else if (s.contains("properties") || s.contains("additionalProperties") ||
               s.contains("required")) {
      types.push_back("object");
    } else if (s.contains("items")) {
      types.push_back("array");
    } else {
      for (const auto& [k, v] : s.items())
        if (!is_annotation(k) && k != "$defs" && k != "definitions")
          bad(at, "keyword '" + k + "' without a type is not supported");
      return any_value();
    }
    if (types.size() == 1) return typed(s, types[0], at, types);
    Node n = make(Kind::AnyOf);
    for (const auto& t : types) n.alts.push_back(typed(s, t, at, types));
    return add(std::move(n));
  }

  static bool is_annotation(const std::string& k) {
    return k == "title" || k == "description" || k == "default" || k == "examples" ||
           k == "$schema" || k == "$id" || k == "$comment" || k == "readOnly" || k == "writeOnly" ||
           k == "deprecated";
  }

  // The keywords each type takes; with a list of types, a keyword of any of them is fine
  // (JSON schema applies minLength to strings only, and so on).
  static std::vector<std::string> keywords_of(const std::string& type) {
    if (type == "object" || type == "json_object")
      return {"properties", "required", "additionalProperties"};
    if (type == "array") return {"items", "minItems", "maxItems"};
    if (type == "string") return {"minLength", "maxLength", "pattern"};
    if (type == "integer") return {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    return {};
  }

  void only(const json& s, const std::string& at, const std::string& type,
            const std::vector<std::string>& types) {
    for (const auto& [k, v] : s.items()) {
      if (is_annotation(k) || k == "type" || k == "$defs" || k == "definitions") continue;
      bool ok = false;
      for (const auto& t : types) {
        const auto kws = keywords_of(t);
        ok = ok || std::find(kws.begin(), kws.end(), k) != kws.end();
      }
      if (!ok) bad(at, "keyword '" + k + "' is not supported on type '" + type + "'");
    }
  }

  int typed(const json& s, const std::string& type, const std::string& at,
            const std::vector<std::string>& types) {
    if (type == "object" || type == "json_object") {
      only(s, at, type, types);
      Node n = make(Kind::Object);
      if (s.contains("properties")) {
        const json& p = s["properties"];
        if (!p.is_object()) bad(at, "properties must be an object, got " + json_brief(p));
        if (p.size() > 64) bad(at, "more than 64 properties are not supported");
        for (const auto& [k, v] : p.items())
          n.props.push_back({json(k).dump(), compile(v, at + "/properties/" + k)});
      }
      if (s.contains("required")) {
        const json& r = s["required"];
        if (!r.is_array()) bad(at, "required must be an array of names, got " + json_brief(r));
        for (const auto& name : r) {
          if (!name.is_string()) bad(at, "required lists " + json_brief(name) + ", not a name");
          const std::string key = json(name.get<std::string>()).dump();
          auto it = std::find_if(n.props.begin(), n.props.end(),
                                 [&](const Property& q) { return q.key == key; });
          if (it == n.props.end())
            bad(at, "required names " + key + ", which is not in properties");
          n.required |= uint64_t(1) << (it - n.props.begin());
        }
      }
      if (s.contains("additionalProperties")) {
        const json& a = s["additionalProperties"];
        if (a.is_boolean())
          n.additional = a.get<bool>() ? any_value() : -1;
        else
          n.additional = compile(a, at + "/additionalProperties");
      } else if (!s.contains("properties")) {
        n.additional = any_value();  // {"type": "object"}: any object
      }
      return add(std::move(n));
    }
    if (type == "array") {
      only(s, at, type, types);
      Node n = make(Kind::Array);
      n.items = s.contains("items") ? compile(s["items"], at + "/items") : any_value();
      if (s.contains("minItems")) n.min_items = as_count(s["minItems"], at, "minItems");
      if (s.contains("maxItems")) n.max_items = as_count(s["maxItems"], at, "maxItems");
      if (n.min_items > n.max_items)
        bad(at, "minItems " + std::to_string(n.min_items) + " > maxItems " +
                    std::to_string(n.max_items));
      return add(std::move(n));
    }
    if (type == "string") {
      only(s, at, type, types);
      Node n = make(Kind::String);
      if (s.contains("minLength")) n.min_len = as_count(s["minLength"], at, "minLength");
      if (s.contains("maxLength")) n.max_len = as_count(s["maxLength"], at, "maxLength");
      if (n.min_len > n.max_len)
        bad(at,
            "minLength " + std::to_string(n.min_len) + " > maxLength " + std::to_string(n.max_len));
      if (s.contains("pattern")) {
        if (!s["pattern"].is_string()) bad(at, "pattern must be a string");
        g_->patterns.push_back(compile_pattern(s["pattern"].get<std::string>(), at));
        n.pattern = static_cast<int>(g_->patterns.size()) - 1;
      }
      return add(std::move(n));
    }
    if (type == "integer") {
      only(s, at, type, types);
      Node n = make(Kind::Integer);
      auto bound = [&](const char* kw) -> std::optional<double> {
        if (!s.contains(kw)) return std::nullopt;
        if (!s[kw].is_number()) bad(at, std::string("'") + kw + "' must be a number");
        return s[kw].get<double>();
      };
      constexpr double kBig = 9.2e18;
      if (auto v = bound("minimum"))
        n.lo = std::max<int64_t>(n.lo, (int64_t)std::clamp(std::ceil(*v), -kBig, kBig));
      if (auto v = bound("exclusiveMinimum"))
        n.lo = std::max<int64_t>(n.lo, (int64_t)std::clamp(std::floor(*v) + 1, -kBig, kBig));
      if (auto v = bound("maximum"))
        n.hi = std::min<int64_t>(n.hi, (int64_t)std::clamp(std::floor(*v), -kBig, kBig));
      if (auto v = bound("exclusiveMaximum"))
        n.hi = std::min<int64_t>(n.hi, (int64_t)std::clamp(std::ceil(*v) - 1, -kBig, kBig));
      // 18 digits at most: keep the range within what the matcher can write.
      n.lo = std::max<int64_t>(n.lo, -999999999999999999);
      n.hi = std::min<int64_t>(n.hi, 999999999999999999);
      if (n.lo > n.hi) bad(at, "the integer range is empty");
      return add(std::move(n));
    }
    if (type == "number") {
      only(s, at, type, types);
      return add(make(Kind::Number));
    }
    if (type == "boolean") {
      only(s, at, type, types);
      return literals({"false", "true"});
    }
    if (type == "null") {
      only(s, at, type, types);
      return literals({"null"});
    }
    bad(at, "unsupported type " + string_brief(type));
  }

  // ^? atom quantifier? ... $?; an unanchored end allows any characters there, as JSON
  // schema's pattern matches anywhere in the string.
  static Pattern compile_pattern(const std::string& re, const std::string& at) {
    using Set = std::array<uint64_t, 2>;
    auto add_char = [](Set& s, int c) {
      if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') s[c >> 6] |= uint64_t(1) << (c & 63);
    };
    auto range = [&](Set& s, int a, int b) {
      for (int c = a; c <= b; c++) add_char(s, c);
    };
    Set any{};
    range(any, 0x20, 0x7e);
    auto shorthand = [&](char e, Set& s) {
      Set t{};
      switch (e) {
        case 'd':
        case 'D':
          range(t, '0', '9');
          break;
        case 'w':
        case 'W':
          range(t, '0', '9'), range(t, 'a', 'z'), range(t, 'A', 'Z'), add_char(t, '_');
          break;
        case 's':
        case 'S':
          add_char(t, ' ');
          break;
        default:
          return false;
      }
      if (e >= 'A' && e <= 'Z') t = {any[0] & ~t[0], any[1] & ~t[1]};
      s[0] |= t[0], s[1] |= t[1];
      return true;
    };
    auto err = [&](const std::string& what) {
      bad(at, "pattern " + string_brief(re) + ": " + what +
                  " (supported: ^, $, literal characters, ., [classes], \\d \\w \\s, and ? * + "
                  "{n} {n,} {n,m} after each)");
    };
    Pattern p;
    std::size_t i = 0;
    const bool head = !re.empty() && re[0] == '^';
    if (head) i = 1;
    bool tail = false;
    std::vector<Pattern::Atom> atoms;
    if (!head) atoms.push_back({any, true, true});
    while (i < re.size()) {
      const char c = re[i];
      if (c == '$' && i + 1 == re.size()) {
        tail = true;
        i++;
        break;
      }
      Pattern::Atom a;
      if (c == '(' || c == ')' || c == '|') err("groups and alternation are not supported");
      if (c == '*' || c == '+' || c == '?' || c == '{') err("a quantifier with nothing before it");
      if (c == '.') {
        a.set = any, i++;
      } else if (c == '\\') {
        if (i + 1 >= re.size()) err("it ends with a lone backslash");
        const char e = re[i + 1];
        if (!shorthand(e, a.set)) add_char(a.set, e);
        i += 2;
      } else if (c == '[') {
        std::size_t j = i + 1;
        const bool neg = j < re.size() && re[j] == '^';
        if (neg) j++;
        Set s{};
        bool first = true;
        while (j < re.size() && (re[j] != ']' || first)) {
          first = false;
          int lo = static_cast<unsigned char>(re[j]);
          if (re[j] == '\\') {
            if (j + 1 >= re.size()) err("an unterminated class");
            if (shorthand(re[j + 1], s)) {
              j += 2;
              continue;
            }
            lo = static_cast<unsigned char>(re[j + 1]);
            j++;
          }
          j++;
          if (j + 1 < re.size() && re[j] == '-' && re[j + 1] != ']') {
            int hi = static_cast<unsigned char>(re[j + 1]);
            if (re[j + 1] == '\\' && j + 2 < re.size())
              hi = static_cast<unsigned char>(re[j + 2]), j++;
            if (hi < lo) err("a class range runs backwards");
            range(s, lo, hi);
            j += 2;
          } else {
            add_char(s, lo);
          }
        }
        if (j >= re.size()) err("an unterminated class");
        a.set = neg ? Set{any[0] & ~s[0], any[1] & ~s[1]} : s;
        i = j + 1;
      } else {
        add_char(a.set, static_cast<unsigned char>(c));
        i++;
      }
      if (a.set[0] == 0 && a.set[1] == 0)
        err("an atom matches no printable ASCII character other than '\"' and '\\'");
      int lo = 1, hi = 1;  // hi = -1: unbounded
      if (i < re.size()) {
        const char q = re[i];
        if (q == '?')
          lo = 0, hi = 1, i++;
        else if (q == '*')
          lo = 0, hi = -1, i++;
        else if (q == '+')
          lo = 1, hi = -1, i++;
        else if (q == '{') {
          const auto close = re.find('}', i);
          if (close == std::string::npos) err("an unterminated {");
          const std::string body = re.substr(i + 1, close - i - 1);
          const auto comma = body.find(',');
          try {
            lo = std::stoi(body.substr(0, comma));
            hi = comma == std::string::npos ? lo
                 : comma + 1 == body.size() ? -1
                                            : std::stoi(body.substr(comma + 1));
          } catch (const std::exception&) {
            err("a malformed {n,m}");
          }
          if (lo < 0 || (hi >= 0 && hi < lo)) err("a malformed {n,m}");
          i = close + 1;
        }
      }
      for (int k = 0; k < lo; k++) atoms.push_back({a.set, false, false});
      if (hi < 0)
        atoms.push_back({a.set, true, true});
      else
        for (int k = lo; k < hi; k++) atoms.push_back({a.set, true, false});
      if (atoms.size() > 63) err("it expands to more than 63 positions");
    }
    if (i < re.size()) err("'$' before the end");
    if (!tail) atoms.push_back({any, true, true});
    if (atoms.size() > 63) err("it expands to more than 63 positions");
    p.atoms = std::move(atoms);
    p.need.assign(p.n() + 1, 0);
    for (int k = p.n() - 1; k >= 0; k--) p.need[k] = p.need[k + 1] + (p.atoms[k].optional ? 0 : 1);
    return p;
  }

  // Shortest text of each node, by iterating to a fixed point (references may loop).
  void lengths() {
    auto& g = *g_;
    auto& m = g.min_len;
    m.assign(g.nodes.size(), kInf);
    auto sat = [](long v) { return static_cast<int>(std::min<long>(v, kInf)); };
    for (bool changed = true; changed;) {
      changed = false;
      for (std::size_t i = 0; i < g.nodes.size(); i++) {
        const Node& n = g.nodes[i];
        long v = kInf;
        switch (n.kind) {
          case Kind::Root:
            v = n.items >= 0 ? m[n.items] : kInf;
            break;
          case Kind::Object: {
            long sum = 2, k = 0;
            for (std::size_t p = 0; p < n.props.size(); p++)
              if (n.required >> p & 1) sum += n.props[p].key.size() + 1 + m[n.props[p].value], k++;
            v = sum + std::max(0L, k - 1);
            break;
          }
          case Kind::Array:
            v = n.min_items == 0 ? 2 : 2 + long(n.min_items) * m[n.items] + n.min_items - 1;
            break;
          case Kind::String:
            v = 2 + std::max(n.min_len, n.pattern >= 0 ? g.patterns[n.pattern].chars_needed(
                                                             g.patterns[n.pattern].start())
                                                       : 0);
            break;
          case Kind::Integer:
            v = integer_min_len(n);
            break;
          case Kind::Number:
            v = 1;
            break;
          case Kind::Literal:
            for (const auto& t : n.texts) v = std::min<long>(v, t.size());
            break;
          case Kind::AnyOf:
            for (int a : n.alts) v = std::min<long>(v, m[a]);
            break;
        }
        if (sat(v) < m[i]) m[i] = sat(v), changed = true;
      }
    }
  }

  static int digits(uint64_t x) {
    int d = 1;
    while (x >= 10) x /= 10, d++;
    return d;
  }
  static int integer_min_len(const Node& n) {
    if (n.lo <= 0 && n.hi >= 0) return 1;
    if (n.lo > 0) return digits(static_cast<uint64_t>(n.lo));
    return 1 + digits(static_cast<uint64_t>(-n.hi));
  }

  const json& doc_;
  std::shared_ptr<Grammar> g_;
  std::map<std::string, int> refs_;
  int any_ = -1, depth_ = 0;
};

}  // namespace detail

// Compiles a JSON schema; throws servekit::Error naming the keyword and where it is.
inline std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::json& schema) {
  try {
    return detail::Compiler(schema).run();
  } catch (const nlohmann::json::exception& e) {  // e.g. a $ref into an array at index "01"
    fail("json schema: ", e.what());
  }
}

// The same from text (a file's contents, a request's field): malformed JSON is an error too.
inline std::shared_ptr<const Grammar> compile_json_schema(std::string_view text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // malformed, or a number out of range
    fail("json schema: not JSON (", e.what(), ")");
  }
  return compile_json_schema(j);
}

// Any JSON object: {"type": "json_object"} without a schema.
inline std::shared_ptr<const Grammar> any_json_object() {
  return compile_json_schema(nlohmann::json{{"type", "object"}});
}

}  // namespace servekit::constrain
