// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the subcommands of the `servekit` command share.
#include <charconv>
#include <limits>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "servekit/core/error.hpp"

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

// The vocabulary: --vocab, else the model folder (HF ships vocab.json + merges.txt beside the
// weights, OpenAI's layout encoder.json + vocab.bpe), else $SERVEKIT_VOCAB, else the GPT-2
// vocabulary next to the source tree.
inline fs::path find_vocab(const std::string& vocab, const std::string& model) {
  if (!vocab.empty()) return vocab;
  // Any tokenizer file in the model folder means the folder's own tokenizer: an incomplete
  // pair is then an error naming what is missing, never a silent fall back to GPT-2's.
  if (!model.empty())
    for (const char* f : {"vocab.json", "merges.txt", "encoder.json", "vocab.bpe"})
      if (fs::exists(fs::path(model) / f)) return model;
  if (const char* env = std::getenv("SERVEKIT_VOCAB")) return env;
  return SERVEKIT_DEFAULT_VOCAB;
}

// Invalid UTF-8 in generated text becomes U+FFFD instead of an exception.
inline std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace servekit::cli
