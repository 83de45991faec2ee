// SPDX-License-Identifier: Apache-2.0
#pragma once
// Fields: typed, named reads of a JSON request object. A wrong type, a value out of range or a
// key nobody reads is a 422 that names the field: `parameters.top_k` must be an integer > 0,
// got "3". JSON null is the same as an absent field, as the Python clients send every field.
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "servekit/serve/http/api_error.hpp"

namespace servekit::serve::http {

using json = nlohmann::json;

// Never throws on invalid UTF-8 (a token's bytes alone may be half a character).
inline std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A value for an error message, cut short: the value may be 10 MB.
inline std::string shown(const json& v) {
  std::string s = v.is_structured() ? std::string(v.type_name()) : dump_json(v);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

class Fields {
 public:
  // obj must be an object; prefix names it in messages ("parameters." or "").
  Fields(const json& obj, std::string prefix) : j_(obj), prefix_(std::move(prefix)) {}

  bool has(const char* k) {
    seen_.insert(k);
    return j_.contains(k) && !j_.at(k).is_null();
  }
  const json& at(const char* k) const { return j_.at(k); }
  std::string name(const char* k) const { return "`" + prefix_ + k + "`"; }

  std::optional<bool> boolean(const char* k) {
    if (!has(k)) return std::nullopt;
    if (!at(k).is_boolean()) invalid(name(k), " must be true or false, got ", shown(at(k)));
    return at(k).get<bool>();
  }
  std::optional<std::string> string(const char* k) {
    if (!has(k)) return std::nullopt;
    if (!at(k).is_string()) invalid(name(k), " must be a string, got ", shown(at(k)));
    return at(k).get<std::string>();
  }
  std::optional<int64_t> integer(const char* k, int64_t lo, int64_t hi) {
    if (!has(k)) return std::nullopt;
    const json& v = at(k);
    if (!v.is_number_integer())
      invalid(name(k), " must be an integer in [", lo, ", ", hi, "], got ", shown(v));
    // An unsigned above INT64_MAX reads as negative: compare as unsigned first.
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
      invalid(name(k), " must be an integer in [", lo, ", ", hi, "], got ", shown(v));
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi)
      invalid(name(k), " must be an integer in [", lo, ", ", hi, "], got ", shown(v));
    return x;
  }
  std::optional<uint64_t> seed(const char* k) {
    if (!has(k)) return std::nullopt;
    const json& v = at(k);
    if (!v.is_number_unsigned())
      invalid(name(k), " must be an integer in [0, 2^64 - 1], got ", shown(v));
    return v.get<uint64_t>();
  }
  std::optional<double> number(const char* k) {
    if (!has(k)) return std::nullopt;
    const json& v = at(k);
    if (!v.is_number() || !std::isfinite(v.get<double>()))
      invalid(name(k), " must be a finite number, got ", shown(v));
    return v.get<double>();
  }
  // A string or a list of strings (OpenAI's `stop`), at most max_n of at most max_len bytes.
  std::vector<std::string> strings(const char* k, std::size_t max_n, std::size_t max_len) {
    std::vector<std::string> out;
    if (!has(k)) return out;
    const json& v = at(k);
    if (v.is_string()) {
      out.push_back(v.get<std::string>());
    } else if (v.is_array()) {
      for (const auto& e : v) {
        if (!e.is_string()) invalid(name(k), " must be a list of strings, got an item ", shown(e));
        out.push_back(e.get<std::string>());
      }
    } else {
      invalid(name(k), " must be a string or a list of strings, got ", shown(v));
    }
    if (out.size() > max_n) invalid(name(k), " has ", out.size(), " entries, at most ", max_n);
    for (const auto& s : out) {
      if (s.empty()) invalid(name(k), " has an empty string");
      if (s.size() > max_len)
        invalid(name(k), " has a string of ", s.size(), " bytes, at most ", max_len);
    }
    return out;
  }
  // Accepted only at its no-op value: a feature servekit does not have is refused, not ignored.
  template <class Pred>
  void unsupported(const char* k, Pred is_noop, const char* why = "") {
    if (has(k) && !is_noop(at(k)))
      throw ApiError(
          422, "validation",
          detail::cat(name(k), " = ", shown(at(k)), " is not supported by servekit", why));
  }
  // Every key must have been read: a typo is an error, not a silent default.
  void no_others() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!seen_.contains(it.key()))
        invalid("unknown field `", prefix_, it.key().substr(0, 60), "`");
  }

 private:
  const json& j_;
  std::string prefix_;
  std::set<std::string> seen_;
};

// The request body as a JSON object, or a 422 that says why not.
inline json parse_body(const std::string& body) {
  json j;
  try {
    j = json::parse(body, nullptr, true, false);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    invalid("the body is not valid JSON: ", e.what());
  }
  if (!j.is_object()) invalid("the body must be a JSON object, got ", j.type_name());
  return j;
}

}  // namespace servekit::serve::http
