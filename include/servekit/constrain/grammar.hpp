// SPDX-License-Identifier: Apache-2.0
#pragma once
// A JSON schema compiled into the graph of value shapes the matcher walks byte by byte
// (constrain/matcher.hpp). The supported subset is the one people use for structured output:
//
//   object      properties, required, additionalProperties (false or absent: only the listed
//               keys; true or a schema: other keys too), patternProperties (disjoint
//               patterns: constrain/key_patterns.hpp), keys in any order
//   array       items (false: none past prefixItems), prefixItems, minItems, maxItems,
//               uniqueItems (items from a finite set)
//   string      minLength, maxLength (characters), pattern (a regular expression: see
//               constrain/pattern.hpp), format (constrain/formats.hpp), enum, const
//   integer, number   minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf (exact
//               decimals: constrain/number_range.hpp; a bounded number has no exponent)
//   boolean, null
//   enum, const of any JSON value; anyOf; oneOf whose alternatives declare disjoint types;
//   not of types; allOf of one schema; type as a list; local $ref
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
#include <set>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "servekit/constrain/formats.hpp"
#include "servekit/constrain/grammar_graph.hpp"
#include "servekit/constrain/key_patterns.hpp"
#include "servekit/constrain/min_length.hpp"
#include "servekit/constrain/number_keywords.hpp"
#include "servekit/constrain/schema_keywords.hpp"
#include "servekit/constrain/pattern.hpp"
#include "servekit/core/error.hpp"
#include "servekit/core/json_brief.hpp"

namespace servekit::constrain {

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
    min_lengths(*g_);
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

  // oneOf: exactly one alternative fits. Generated as anyOf, which is right only when no value
  // fits two alternatives: taken when each alternative declares its types (type, or const /
  // enum values; through $ref and a one-schema allOf) and no two share one (integer and number
  // do); anything else is refused, pointing at anyOf.
  int one_of(const json& s, const std::string& at) {
    const json& a = s["oneOf"];
    if (!a.is_array() || a.empty())
      bad(at, "oneOf must be a non-empty array of schemas, got " + json_brief(a));
    for (const auto& [k, v] : s.items())
      if (k != "oneOf" && k != "$defs" && k != "definitions" && !is_annotation(k))
        bad(at, "keyword '" + k + "' beside oneOf is not supported");
    std::vector<std::set<std::string>> types(a.size());
    for (std::size_t i = 0; i < a.size(); i++) {
      const std::string where = at + "/oneOf/" + std::to_string(i);
      types[i] = declared_types(a[i], 0);
      if (types[i].empty())
        bad(where,
            "oneOf is supported when each alternative declares a type no other has (type, const "
            "or enum); this one declares none (anyOf allows values that fit several)");
      for (std::size_t j = 0; j < i; j++)
        for (const auto& t : types[i])
          for (const auto& u : types[j])
            if (t == u || (t == "integer" && u == "number") || (t == "number" && u == "integer"))
              bad(at, "oneOf alternatives " + std::to_string(j) + " and " + std::to_string(i) +
                          " may both fit a value of type " + string_brief(t) +
                          ", which oneOf forbids and servekit cannot rule out (anyOf allows it)");
    }
    Node n = make(Kind::AnyOf);
    for (std::size_t i = 0; i < a.size(); i++)
      n.alts.push_back(compile(a[i], at + "/oneOf/" + std::to_string(i)));
    return add(std::move(n));
  }

  // The JSON types a schema's values can have, as it declares them; empty if it does not.
  std::set<std::string> declared_types(const json& s, int hops) const {
    if (!s.is_object() || hops > 16) return {};
    if (s.contains("$ref") && s["$ref"].is_string()) {
      const std::string ref = s["$ref"].get<std::string>();
      if (ref.rfind("#", 0) != 0) return {};
      try {
        const json::json_pointer ptr(ref.substr(1));
        return doc_.contains(ptr) ? declared_types(doc_.at(ptr), hops + 1)
                                  : std::set<std::string>{};
      } catch (const std::exception&) {
        return {};
      }
    }
    if (s.contains("allOf") && s["allOf"].is_array() && s["allOf"].size() == 1)
      return declared_types(s["allOf"][0], hops + 1);
    std::set<std::string> out;
    if (s.contains("const")) out.insert(value_type(s["const"]));
    if (s.contains("enum") && s["enum"].is_array())
      for (const auto& v : s["enum"]) out.insert(value_type(v));
    if (!out.empty()) return out;
    if (s.contains("type")) {
      const json& t = s["type"];
      auto add_type = [&](const json& x) {
        if (!x.is_string()) return;
        const std::string n = x.get<std::string>();
        out.insert(n == "json_object" ? "object" : n);
      };
      if (t.is_array())
        for (const auto& x : t) add_type(x);
      else
        add_type(t);
    }
    return out;
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
                                  "prefixItems",
                                  "minItems",
                                  "maxItems",
                                  "minLength",
                                  "maxLength",
                                  "pattern",
                                  "format",
                                  "enum",
                                  "const",
                                  "minimum",
                                  "maximum",
                                  "exclusiveMinimum",
                                  "exclusiveMaximum",
                                  "multipleOf",
                                  "uniqueItems",
                                  "patternProperties",
                                  "not",
                                  "anyOf",
                                  "oneOf",
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
    if (s.contains("oneOf")) return one_of(s, at);
    if (s.contains("anyOf")) {
      const json& a = s["anyOf"];
      if (!a.is_array() || a.empty())
        bad(at, "anyOf must be a non-empty array of schemas, got " + json_brief(a));
      for (const auto& [k, v] : s.items())
        if (k != "anyOf" && k != "$defs" && k != "definitions" && !is_annotation(k))
          bad(at, "keyword '" + k + "' beside anyOf is not supported");
      Node n = make(Kind::AnyOf);
      for (std::size_t i = 0; i < a.size(); i++)
        n.alts.push_back(compile(a[i], at + "/anyOf/" + std::to_string(i)));
      return add(std::move(n));
    }
    if (s.contains("not")) return compile(without_not(s, at), at);
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
    } else if (s.contains("items") || s.contains("prefixItems")) {
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

  // patternProperties: keys that match a pattern (and no other, and no listed property).
  void pattern_properties(const json& s, const std::string& at, Node& n) {
    const json& pp = s["patternProperties"];
    if (!pp.is_object()) bad(at, "patternProperties must be an object, got " + json_brief(pp));
    if (n.additional >= 0)
      bad(at,
          "additionalProperties beside patternProperties must be false or absent (keys that "
          "match no pattern are not supported)");
    for (const auto& [re, v] : pp.items()) {
      const std::string where = at + "/patternProperties/" + re;
      Node key = make(Kind::String);
      g_->patterns.push_back(compile_pattern(re, where));
      key.pattern = static_cast<int>(g_->patterns.size()) - 1;
      const Pattern& p = g_->patterns.back();
      for (const Property& q : n.props)
        if (key_matches(p, json::parse(q.key).get<std::string>()))
          bad(where, "the pattern matches the listed property " + q.key +
                         ", which would need both schemas (not supported)");
      for (const PatternProperty& o : n.pattern_props) {
        const Meet m = patterns_meet(g_->patterns[g_->nodes[o.key].pattern], p);
        if (m != Meet::No)
          bad(where, std::string(m == Meet::Yes ? "a key may match both this pattern and "
                                                : "cannot tell whether a key may match both "
                                                  "this pattern and ") +
                         "an earlier one, which would need both schemas (not supported)");
      }
      const int key_node = add(std::move(key));
      n.pattern_props.push_back({key_node, compile(v, where)});
    }
  }

  // uniqueItems: true where the items are a finite set of values (enum, const, boolean, null,
  // or anyOf of those), each written once at most.
  void unique_items(const json& s, const std::string& at, Node& n) {
    const json& u = s["uniqueItems"];
    if (!u.is_boolean()) bad(at, "uniqueItems must be true or false, got " + json_brief(u));
    if (!u.get<bool>()) return;
    if (!n.prefix.empty()) bad(at, "uniqueItems beside prefixItems is not supported");
    std::vector<std::string> texts;
    if (!literal_texts(n.items, texts, 0))
      bad(at,
          "uniqueItems is supported where the items are a finite set of values (enum, const, "
          "boolean; anyOf of those)");
    std::vector<std::string> distinct;  // one spelling of each value (1 and 1.0 are one)
    std::vector<json> seen;
    for (const std::string& t : texts) {
      json v = json::parse(t);
      if (std::find(seen.begin(), seen.end(), v) != seen.end()) continue;
      seen.push_back(std::move(v));
      distinct.push_back(t);
    }
    if (distinct.size() > 64) bad(at, "uniqueItems over more than 64 values is not supported");
    const int k = static_cast<int>(distinct.size());
    if (n.min_items > k)
      bad(at, "minItems " + std::to_string(n.min_items) + " > the " + std::to_string(k) +
                  " distinct values uniqueItems allows");
    n.max_items = std::min(n.max_items, k);
    // Shortest first, so that the shortest unused values are the first unused ones.
    std::stable_sort(
        distinct.begin(), distinct.end(),
        [](const std::string& x, const std::string& y) { return x.size() < y.size(); });
    n.items = literals(std::move(distinct));
    n.unique = true;
  }
  bool literal_texts(int id, std::vector<std::string>& out, int depth) const {
    const Node& nd = g_->nodes[id];
    if (nd.kind == Kind::Literal) {
      out.insert(out.end(), nd.texts.begin(), nd.texts.end());
      return true;
    }
    if (nd.kind != Kind::AnyOf || depth > 16) return false;
    for (int a : nd.alts)
      if (!literal_texts(a, out, depth + 1)) return false;
    return true;
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
      } else if (!s.contains("properties") && !s.contains("patternProperties")) {
        n.additional = any_value();  // {"type": "object"}: any object
      }
      if (s.contains("patternProperties")) pattern_properties(s, at, n);
      return add(std::move(n));
    }
    if (type == "array") {
      only(s, at, type, types);
      Node n = make(Kind::Array);
      if (s.contains("prefixItems")) {
        const json& p = s["prefixItems"];
        if (!p.is_array()) bad(at, "prefixItems must be an array of schemas, got " + json_brief(p));
        for (std::size_t i = 0; i < p.size(); i++)
          n.prefix.push_back(compile(p[i], at + "/prefixItems/" + std::to_string(i)));
      }
      if (s.contains("minItems")) n.min_items = as_count(s["minItems"], at, "minItems");
      if (s.contains("maxItems")) n.max_items = as_count(s["maxItems"], at, "maxItems");
      if (s.contains("items") && s["items"].is_boolean() && !s["items"].get<bool>()) {
        // No item past the prefix.
        n.items = any_value();
        n.max_items = std::min(n.max_items, static_cast<int>(n.prefix.size()));
      } else {
        n.items = s.contains("items") ? compile(s["items"], at + "/items") : any_value();
      }
      if (n.min_items > n.max_items)
        bad(at, "minItems " + std::to_string(n.min_items) + " > maxItems " +
                    std::to_string(n.max_items));
      if (s.contains("uniqueItems")) unique_items(s, at, n);
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
        if (s.contains("format")) bad(at, "'format' beside 'pattern' is not supported");
        g_->patterns.push_back(compile_pattern(s["pattern"].get<std::string>(), at));
        n.pattern = static_cast<int>(g_->patterns.size()) - 1;
      }
      if (s.contains("format")) {
        if (!s["format"].is_string()) bad(at, "format must be a string");
        const std::string f = s["format"].get<std::string>();
        const char* re = format_pattern(f);
        if (!re)
          bad(at, "format " + json_brief(s["format"]) +
                      " is not supported (supported: " + kFormatNames + ")");
        g_->patterns.push_back(compile_pattern(re, at + "/format"));
        n.pattern = static_cast<int>(g_->patterns.size()) - 1;
      }
      return add(std::move(n));
    }
    if (type == "integer") {
      only(s, at, type, types);
      Node n = make(Kind::Integer);
      integer_keywords(s, at, n);
      return add(std::move(n));
    }
    if (type == "number") {
      only(s, at, type, types);
      Node n = make(Kind::Number);
      number_keywords(s, at, n);
      return add(std::move(n));
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
