// SPDX-License-Identifier: Apache-2.0
#pragma once
// A schema's range keywords (minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf)
// into an integer or number node, read from the numbers' JSON text so that they are exact
// (constrain/number_range.hpp).
#include <string>

#include <nlohmann/json.hpp>

#include "servekit/constrain/grammar_graph.hpp"
#include "servekit/constrain/number_range.hpp"
#include "servekit/constrain/schema_keywords.hpp"
#include "servekit/core/json_brief.hpp"

namespace servekit::constrain::detail {

// Closed bounds and step in units: lo, hi, step (0: none).
inline DecimalRange range_keywords(const nlohmann::json& s, const std::string& at) {
  using range::i128;
  DecimalRange r;
  auto read = [&](const char* kw, bool up, bool* exact = nullptr) -> std::optional<i128> {
    if (!s.contains(kw)) return std::nullopt;
    const nlohmann::json& v = s[kw];
    if (!v.is_number()) bad(at, std::string("'") + kw + "' must be a number, got " + json_brief(v));
    return range::to_units(v.dump(), up, exact);
  };
  if (auto v = read("minimum", true)) r.lo = std::max(r.lo, *v);
  if (auto v = read("exclusiveMinimum", false)) r.lo = std::max(r.lo, *v + 1);
  if (auto v = read("maximum", false)) r.hi = std::min(r.hi, *v);
  if (auto v = read("exclusiveMaximum", true)) r.hi = std::min(r.hi, *v - 1);
  bool exact = true;
  if (auto v = read("multipleOf", false, &exact)) {
    if (*v <= 0 || !exact || *v >= kNumCap)
      bad(at, "'multipleOf' " + json_brief(s["multipleOf"]) +
                  " is not supported (a positive number with at most 18 fraction digits "
                  "and 16 integer digits)");
    r.step = *v;
  }
  return r;
}

// An integer node's range: bounds rounded inward, a fractional multipleOf as the integer step
// it implies (integers that are multiples of 2.5 are the multiples of 5).
inline void integer_keywords(const nlohmann::json& s, const std::string& at, Node& n) {
  using range::i128;
  const DecimalRange r = range_keywords(s, at);
  constexpr i128 kMax = 999'999'999'999'999'999;  // 18 digits: what the matcher writes
  n.lo = static_cast<int64_t>(std::max(-kMax, range::ceil_div(r.lo, range::kUnit)));
  n.hi = static_cast<int64_t>(std::min(kMax, range::floor_div(r.hi, range::kUnit)));
  if (r.step != 0)
    n.multiple =
        static_cast<int64_t>(std::min<i128>(r.step / range::gcd(r.step, range::kUnit), kMax + 1));
  if (n.lo > n.hi || range::integer_shortest(n) >= kInf)
    bad(at, "the integer range is empty: no integer satisfies its minimum, maximum and multipleOf");
}

inline void number_keywords(const nlohmann::json& s, const std::string& at, Node& n) {
  n.num = range_keywords(s, at);
  if (n.num.any() && range::number_shortest(n.num) >= kInf)
    bad(at,
        "the number range is empty: no number of at most 15 digits satisfies its minimum, "
        "maximum and multipleOf");
}

}  // namespace servekit::constrain::detail
