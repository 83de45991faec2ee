// SPDX-License-Identifier: Apache-2.0
#pragma once
// `response_format` as LoRAX and OpenAI spell it, turned into a request's JSON grammar:
//
//   LoRAX   {"type": "json_object", "schema": {...}}   (no schema: any JSON object)
//   OpenAI  {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ..}}
//           {"type": "json_object"}, {"type": "text"} (no constraint)
//
// and vLLM's guided decoding fields (guided_json, guided_regex, guided_choice) and TGI's
// `grammar` ({"type": "json" | "regex", "value": ...}), which also constrain a whole text to a
// regular expression or a choice of texts (constrain/text_grammar.hpp).
//
// A schema the compiler cannot honour is a 422 that names the keyword and where it is.
// Compiled grammars are kept by their text (the last 16 distinct ones), so that clients that
// send the same schema with every request share one grammar and its mask cache (each at most
// ~13 MB of GPT-2 masks: constrain/token_mask.hpp).
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "servekit/constrain/grammar.hpp"
#include "servekit/constrain/gbnf.hpp"
#include "servekit/constrain/text_grammar.hpp"
#include "servekit/serve/http/api_error.hpp"
#include "servekit/serve/http/json_fields.hpp"

namespace servekit::serve::http {

// The grammar kept under key, or compile()'s, which a compile error makes a 422 naming field.
template <class F>
std::shared_ptr<const constrain::Grammar> kept_grammar(const std::string& key,
                                                       const std::string& field, F&& compile) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const constrain::Grammar>> made;
  {
    std::lock_guard lock(mu);
    if (auto it = made.find(key); it != made.end()) return it->second;
  }
  std::shared_ptr<const constrain::Grammar> g;
  try {
    g = compile();
  } catch (const Error& e) {
    invalid("`", field, "`: ", e.what());
  }
  std::lock_guard lock(mu);
  if (made.size() >= 16) made.clear();
  made.emplace(key, g);
  return g;
}

// A schema given as JSON text (vLLM's guided_json, TGI's grammar value may be either).
inline json parse_schema_text(const std::string& text, const std::string& field) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    invalid("`", field, "`: the schema is not JSON (", e.what(), ")");
  }
}

inline std::shared_ptr<const constrain::Grammar> grammar_for(const json& schema,
                                                             const std::string& field) {
  return kept_grammar("schema " + schema.dump(), field,
                      [&] { return constrain::compile_json_schema(schema); });
}

// A schema given as an object or as its JSON text (vLLM's guided_json, TGI's grammar value).
inline std::shared_ptr<const constrain::Grammar> schema_grammar(const json& v,
                                                                const std::string& field) {
  return v.is_string() ? grammar_for(parse_schema_text(v.get<std::string>(), field), field)
                       : grammar_for(v, field);
}

// A whole text matching a regular expression (a JSON string).
inline std::shared_ptr<const constrain::Grammar> regex_grammar(const json& re,
                                                               const std::string& field) {
  if (!re.is_string())
    invalid("`", field, "` must be a string (a regular expression), got ", shown(re));
  const std::string text = re.get<std::string>();
  return kept_grammar("regex " + text, field, [&] { return constrain::compile_regex(text); });
}

// A whole text of a GBNF grammar's rule root (a JSON string: the grammar's text).
inline std::shared_ptr<const constrain::Grammar> gbnf_grammar(const json& v,
                                                              const std::string& field) {
  if (!v.is_string()) invalid("`", field, "` must be a string (a GBNF grammar), got ", shown(v));
  const std::string text = v.get<std::string>();
  return kept_grammar("gbnf " + text, field, [&] { return constrain::compile_gbnf(text); });
}

// A whole text that is one of the choices (a JSON array of strings).
inline std::shared_ptr<const constrain::Grammar> choice_grammar(const json& cs,
                                                                const std::string& field) {
  if (!cs.is_array() || cs.empty())
    invalid("`", field, "` must be a non-empty array of strings, got ", shown(cs));
  std::vector<std::string> choices;
  for (const auto& c : cs) {
    if (!c.is_string()) invalid("`", field, "` must hold strings only, got ", shown(c));
    choices.push_back(c.get<std::string>());
  }
  return kept_grammar("choice " + cs.dump(), field,
                      [&] { return constrain::compile_choice(choices); });
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

// vLLM's guided decoding fields beside OpenAI's response_format (f: the request's fields): the
// grammar of the one given (at most one of them, response_format's "text" aside), or null.
inline std::shared_ptr<const constrain::Grammar> guided_grammar(Fields& f) {
  std::shared_ptr<const constrain::Grammar> g;
  std::string from;
  auto take = [&](const char* field, std::shared_ptr<const constrain::Grammar> next) {
    if (!next) return;
    if (g) invalid("`", from, "` and `", field, "` both constrain the output: give one of them");
    g = std::move(next), from = field;
  };
  if (f.has("response_format"))
    take("response_format", response_format(f.at("response_format"), "response_format"));
  if (f.has("guided_json")) take("guided_json", schema_grammar(f.at("guided_json"), "guided_json"));
  if (f.has("guided_regex"))
    take("guided_regex", regex_grammar(f.at("guided_regex"), "guided_regex"));
  if (f.has("guided_choice"))
    take("guided_choice", choice_grammar(f.at("guided_choice"), "guided_choice"));
  if (f.has("guided_grammar"))
    take("guided_grammar", gbnf_grammar(f.at("guided_grammar"), "guided_grammar"));
  return g;
}

// TGI's `grammar` parameter: {"type": "json" | "json_object", "value": schema} or
// {"type": "regex", "value": "..."}.
inline std::shared_ptr<const constrain::Grammar> tgi_grammar(const json& v,
                                                             const std::string& field) {
  if (!v.is_object()) invalid("`", field, "` must be an object, got ", shown(v));
  Fields f(v, field + ".");
  const auto type = f.string("type");
  if (!type) invalid("`", field, ".type` is required: json or regex");
  if (!f.has("value")) invalid("`", field, ".value` is required");
  std::shared_ptr<const constrain::Grammar> g;
  if (*type == "json" || *type == "json_object") {
    g = schema_grammar(f.at("value"), field + ".value");
  } else if (*type == "regex") {
    g = regex_grammar(f.at("value"), field + ".value");
  } else {
    invalid("`", field, ".type` must be json or regex, got ", shown(v.at("type")));
  }
  f.no_others();
  return g;
}

}  // namespace servekit::serve::http
