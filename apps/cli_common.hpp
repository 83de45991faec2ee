// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the subcommands of the `servekit` command share.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstddef>
#include <limits>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/text/vocab_dir.hpp"

namespace servekit::cli {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Numbers from the command line, strictly: all digits, in range, nothing left over; an error
// names the flag and shows the text (cut short).
inline std::string shown(const std::string& t) {
  return t.size() > 40 ? "'" + t.substr(0, 40) + "...'" : "'" + t + "'";
}
template <class T>
T parse_number(const std::string& flag, const std::string& t) {
  T v{};
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || ec == std::errc::invalid_argument || end != t.data() + t.size())
    fail(flag, ": ", shown(t), " is not a whole number");
  if (ec == std::errc::result_out_of_range)
    fail(flag, ": ", shown(t), " is out of range (", std::numeric_limits<T>::min(), " to ",
         std::numeric_limits<T>::max(), ")");
  return v;
}
// "12,7,300": token ids, none empty.
inline std::vector<int32_t> parse_ids(const std::string& flag, const std::string& t) {
  if (t.empty()) fail(flag, ": no ids given");
  std::vector<int32_t> ids;
  std::size_t start = 0;
  for (int i = 1;; i++) {
    const std::size_t comma = t.find(',', start);
    const std::string e =
        t.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (e.empty()) fail(flag, ": element ", i, " of ", shown(t), " is empty");
    ids.push_back(parse_number<int32_t>(flag + " element " + std::to_string(i), e));
    if (comma == std::string::npos) return ids;
    start = comma + 1;
  }
}

// Invalid UTF-8 in generated text becomes U+FFFD instead of an exception.
inline std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Edit distance (insertions, deletions, substitutions) between two short strings.
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); j++) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); i++) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); j++) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

// What to say about the arguments a subcommand did not know (its remaining()): the nearest
// known flag for a mistyped one, as git and cargo do.
inline std::string unknown_args_message(const CLI::App& sub) {
  std::string msg;
  for (const std::string& arg : sub.remaining()) {
    if (!msg.empty()) msg += "; ";
    if (arg.empty() || arg[0] != '-') {
      msg += "unexpected argument " + shown(arg) + " (quote a prompt that has spaces)";
      continue;
    }
    const std::string flag = arg.substr(0, arg.find('='));
    std::string best;
    std::size_t best_d = SIZE_MAX;
    for (const CLI::Option* o : sub.get_options()) {
      std::vector<std::string> names;
      for (const auto& n : o->get_lnames()) names.push_back("--" + n);
      for (const auto& n : o->get_snames()) names.push_back("-" + n);
      for (const auto& n : names)
        if (const std::size_t d = edit_distance(flag, n); d < best_d) best_d = d, best = n;
    }
    msg += "unknown option " + shown(flag);
    if (!best.empty() && best_d <= std::max<std::size_t>(2, flag.size() / 3))
      msg += " (did you mean " + best + "?)";
  }
  return msg + " (see --help)";
}

}  // namespace servekit::cli
