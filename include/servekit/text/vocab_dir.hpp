// SPDX-License-Identifier: Apache-2.0
#pragma once
// Where the GPT-2 vocabulary is when no model folder brings its own. It ships with servekit
// (data/gpt2 in the source tree, share/servekit/gpt2 once installed), so an installed program
// keeps working after the source tree is gone and a copied install keeps working when moved.
//
// First that holds a vocabulary wins:
//   1. $SERVEKIT_VOCAB
//   2. <folder of the running program>/../share/servekit/gpt2  (an installed or moved prefix)
//   3. SERVEKIT_VOCAB_DIR, set by the servekit CMake target: data/gpt2 of the source tree
//      (add_subdirectory, build tree) or <install prefix>/share/servekit/gpt2 (find_package)
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "servekit/core/error.hpp"

namespace servekit::text {

// A folder with OpenAI's encoder.json + vocab.bpe or Hugging Face's vocab.json + merges.txt.
inline bool holds_vocab(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  return (fs::exists(dir / "encoder.json", ec) && fs::exists(dir / "vocab.bpe", ec)) ||
         (fs::exists(dir / "vocab.json", ec) && fs::exists(dir / "merges.txt", ec));
}

// The places default_vocab_dir() looks, in order (the environment variable only when set).
inline std::vector<std::filesystem::path> vocab_search_path() {
  namespace fs = std::filesystem;
  std::vector<fs::path> places;
  if (const char* env = std::getenv("SERVEKIT_VOCAB"); env && *env) places.emplace_back(env);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) places.push_back(exe.parent_path().parent_path() / "share" / "servekit" / "gpt2");
#ifdef SERVEKIT_VOCAB_DIR
  places.emplace_back(SERVEKIT_VOCAB_DIR);
#endif
  return places;
}

inline std::filesystem::path default_vocab_dir() {
  // A set but wrong SERVEKIT_VOCAB is an error, not a silent fall back to another vocabulary.
  const auto places = vocab_search_path();
  if (const char* env = std::getenv("SERVEKIT_VOCAB"); env && *env) {
    if (!holds_vocab(places.front()))
      fail("SERVEKIT_VOCAB=", env,
           ": no vocabulary there (needs encoder.json + vocab.bpe or vocab.json + merges.txt)");
    return places.front();
  }
  for (const auto& p : places)
    if (holds_vocab(p)) return p;
  std::string tried;
  for (const auto& p : places) tried += "\n  " + p.string();
  fail("the GPT-2 vocabulary was not found; looked in:", tried,
       "\nset SERVEKIT_VOCAB or pass --vocab to a folder with encoder.json + vocab.bpe");
}

// The tokenizer folder for a program given --vocab (may be empty) and a model folder (may be
// empty): --vocab wins; then a model folder with any tokenizer file is the folder's own
// tokenizer (an incomplete pair is then an error naming what is missing, never a silent fall
// back to GPT-2's); else default_vocab_dir().
inline std::filesystem::path vocab_dir_for(const std::filesystem::path& vocab,
                                           const std::filesystem::path& model) {
  namespace fs = std::filesystem;
  if (!vocab.empty()) return vocab;
  std::error_code ec;
  if (!model.empty())
    for (const char* f : {"vocab.json", "merges.txt", "encoder.json", "vocab.bpe"})
      if (fs::exists(model / f, ec)) return model;
  return default_vocab_dir();
}

}  // namespace servekit::text
