// SPDX-License-Identifier: Apache-2.0
#pragma once
// `response_format` as LoRAX and OpenAI spell it, turned into a request's JSON grammar:
//
//   LoRAX   {"type": "json_object", "schema": {...}}   (no schema: any JSON object)
//   OpenAI  {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ..}}
//           {"type": "json_object"}, {"type": "text"} (no constraint)
//
// A schema the compiler cannot honour is a 422 that names the keyword and where it is.
// Compiled grammars are kept by schema text (the last 16 distinct ones), so that clients that
// send the same schema with every request share one grammar and its mask cache (each at most
// ~13 MB of GPT-2 masks: constrain/token_mask.hpp).
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "servekit/constrain/grammar.hpp"
#include "servekit/serve/http/api_error.hpp"
#include "servekit/serve/http/json_fields.hpp"

namespace servekit::serve::http {

inline std::shared_ptr<const constrain::Grammar> grammar_for(const json& schema,
                                                             const std::string& field) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const constrain::Grammar>> made;
  const std::string key = schema.dump();
  {
    std::lock_guard lock(mu);
    if (auto it = made.find(key); it != made.end()) return it->second;
  }
  std::shared_ptr<const constrain::Grammar> g;
  try {
    g = constrain::compile_json_schema(schema);
  } catch (const Error& e) {
    invalid("`", field, "`: ", e.what());
  }
  std::lock_guard lock(mu);
  if (made.size() >= 16) made.clear();
  made.emplace(key, g);
  return g;
}

// The grammar a `response_format` value asks for; null for none ("text").
inline std::shared_ptr<const constrain::Grammar> response_format(const json& rf,
                                                                 const std::string& field) {
  if (!rf.is_object()) invalid("`", field, "` must be an object, got ", shown(rf));
  Fields f(rf, field + ".");
  const auto type = f.string("type");
  if (!type) invalid("`", field, ".type` is required: json_object, json_schema or text");
  std::shared_ptr<const constrain::Grammar> g;
  if (*type == "text") {
  } else if (*type == "json_object") {
    if (f.has("schema")) {
      g = grammar_for(f.at("schema"), field + ".schema");
    } else {
      g = grammar_for(json{{"type", "object"}}, field);
    }
  } else if (*type == "json_schema") {
    if (!f.has("json_schema") || !f.at("json_schema").is_object())
      invalid("`", field, ".json_schema` must be an object with a `schema`");
    Fields js(f.at("json_schema"), field + ".json_schema.");
    js.string("name");
    js.string("description");
    js.boolean("strict");
    if (!js.has("schema")) invalid("`", field, ".json_schema.schema` is required");
    g = grammar_for(js.at("schema"), field + ".json_schema.schema");
    js.no_others();
  } else {
    invalid("`", field, ".type` must be json_object, json_schema or text, got ",
            shown(rf.at("type")));
  }
  f.no_others();
  return g;
}

}  // namespace servekit::serve::http
