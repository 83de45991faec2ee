// SPDX-License-Identifier: Apache-2.0
#pragma once
// The schema compiler's (constrain/grammar.hpp) reading of keywords that need no graph: errors
// naming where they are, counts, the JSON types and the keywords each takes, annotations, and
// `not` of types rewritten as the schema's other types.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "servekit/constrain/pattern.hpp"
#include "servekit/core/error.hpp"
#include "servekit/core/json_brief.hpp"

namespace servekit::constrain::detail {

using json = nlohmann::json;

[[noreturn]] inline void bad(const std::string& at, const std::string& what) {
  fail("json schema: at ", at.empty() ? std::string("/") : at, ": ", what);
}

inline int64_t as_int(const json& v, const std::string& at, const char* kw) {
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
inline int as_count(const json& v, const std::string& at, const char* kw) {
  const int64_t n = as_int(v, at, kw);
  if (n < 0) bad(at, std::string("'") + kw + "' must be >= 0, got " + json_brief(v));
  return static_cast<int>(std::min<int64_t>(n, kInf));
}

inline std::set<std::string> type_names(const json& t, const std::string& at) {
  std::set<std::string> out;
  for (const json& x : t.is_array() ? t : json::array({t})) {
    if (!x.is_string()) bad(at, "type must be a name or a list of names, got " + json_brief(t));
    out.insert(x.get<std::string>() == "json_object" ? "object" : x.get<std::string>());
  }
  return out;
}
inline std::vector<std::string> type_list(const std::set<std::string>& s) {
  return {s.begin(), s.end()};
}
inline std::string value_type(const json& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "number";
  return v.type_name();  // null, boolean, string, array, object
}

inline bool is_annotation(const std::string& k) {
  return k == "title" || k == "description" || k == "default" || k == "examples" ||
         k == "$schema" || k == "$id" || k == "$comment" || k == "readOnly" || k == "writeOnly" ||
         k == "deprecated";
}

// The keywords each type takes; with a list of types, a keyword of any of them is fine
// (JSON schema applies minLength to strings only, and so on).
inline std::vector<std::string> keywords_of(const std::string& type) {
  if (type == "object" || type == "json_object")
    return {"properties", "required", "additionalProperties", "patternProperties"};
  if (type == "array") return {"items", "prefixItems", "minItems", "maxItems", "uniqueItems"};
  if (type == "string") return {"minLength", "maxLength", "pattern", "format"};
  if (type == "integer" || type == "number")
    return {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"};
  return {};
}

// not: of a type ({"not": {"type": ...}}), as the schema's other types.
inline json without_not(const json& s, const std::string& at) {
  const json& no = s["not"];
  const std::string where = at + "/not";
  if (no.is_object())
    for (const auto& [k, v] : no.items())
      if (k != "type" && !is_annotation(k))
        bad(where, "'not' is supported with a type only, not with '" + k + "'");
  if (!no.is_object() || !no.contains("type"))
    bad(where, "'not' is supported with a type only ({\"not\": {\"type\": ...}})");
  const std::set<std::string> out = type_names(no["type"], where);
  auto excluded = [&](const std::string& t) {
    return out.count(t) || (t == "integer" && out.count("number"));
  };
  std::vector<std::string> kept;
  for (const std::string& t :
       s.contains("type")
           ? type_list(type_names(s["type"], at))
           : std::vector<std::string>{"object", "array", "string", "number", "boolean", "null"})
    if (!excluded(t)) kept.push_back(t);
  if (out.count("integer") && !out.count("number") &&
      std::find(kept.begin(), kept.end(), "number") != kept.end())
    bad(where, "'not' integer beside type number (numbers with a fraction) is not supported");
  json r = s;
  r.erase("not");
  if (s.contains("const") || s.contains("enum")) {  // the values of the other types
    if (s.contains("enum") && (!s["enum"].is_array() || s.contains("const")))
      bad(at, "enum must be an array, without const beside it, got " + json_brief(s["enum"]));
    json values = json::array();
    for (const json& v : s.contains("const") ? json::array({s["const"]}) : s["enum"])
      if (!excluded(value_type(v))) values.push_back(v);
    if (values.empty()) bad(at, "'not' excludes every value of its const or enum");
    r.erase("const");
    r["enum"] = values;
    return r;
  }
  if (kept.empty()) bad(at, "'not' excludes every type the schema allows");
  r["type"] = kept.size() == 1 ? json(kept[0]) : json(kept);
  // The keywords of the excluded types only (minLength once strings are out) say nothing.
  for (const auto& t : {"object", "array", "string", "integer"})
    for (const std::string& k : keywords_of(t)) {
      bool used = false;
      for (const std::string& u : kept) {
        const auto kws = keywords_of(u);
        used = used || std::find(kws.begin(), kws.end(), k) != kws.end();
      }
      if (!used) r.erase(k);
    }
  return r;
}

}  // namespace servekit::constrain::detail
