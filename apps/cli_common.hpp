// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the subcommands of the `servekit` command share.
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace servekit::cli {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The vocabulary: --vocab, else the model folder (HF ships vocab.json + merges.txt beside the
// weights), else $SERVEKIT_VOCAB, else the GPT-2 vocabulary next to the source tree.
inline fs::path find_vocab(const std::string& vocab, const std::string& model) {
  if (!vocab.empty()) return vocab;
  if (!model.empty() && fs::exists(fs::path(model) / "vocab.json")) return model;
  if (const char* env = std::getenv("SERVEKIT_VOCAB")) return env;
  return SERVEKIT_DEFAULT_VOCAB;
}

// Invalid UTF-8 in generated text becomes U+FFFD instead of an exception.
inline std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace servekit::cli
