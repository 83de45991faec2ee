// SPDX-License-Identifier: Apache-2.0
#pragma once
// A JSON value as an error message shows it: scalars as written (long strings cut), a small
// flat array in full, any other container by its size. Never recursive: a value nested 100k
// levels deep (a malformed or hostile file) cannot overflow the stack while we describe it.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace servekit {

inline std::string json_brief(const nlohmann::json& j) {
  using json = nlohmann::json;
  auto scalar = [](const json& v) {
    std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
    return s.size() > 80 ? s.substr(0, 77) + "..." : s;
  };
  if (j.is_array()) {
    bool flat = j.size() <= 8;
    for (const auto& v : j) flat = flat && v.is_primitive();
    if (!flat) return "an array of " + std::to_string(j.size()) + " values";
    std::string s = "[";
    for (std::size_t i = 0; i < j.size(); i++) {
      if (i) s += ',';  // (appended apart: GCC 12 warns of a false overlap in "," + string)
      s += scalar(j[i]);
    }
    return s + "]";
  }
  if (j.is_object()) return "an object of " + std::to_string(j.size()) + " keys";
  return scalar(j);
}

// Text from a file as an error message quotes it: a 50 MB line is shown by its first bytes and
// its length, and bytes that are not UTF-8 are shown as U+FFFD.
inline std::string string_brief(std::string_view s) {
  constexpr std::size_t keep = 60;
  const std::string head(s.substr(0, keep));
  std::string out =
      nlohmann::json(head).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > keep)
    out.insert(out.size() - 1, "...") += " (" + std::to_string(s.size()) + " bytes)";
  return out;
}

}  // namespace servekit
