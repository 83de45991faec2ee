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
