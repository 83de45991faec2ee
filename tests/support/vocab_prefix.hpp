// SPDX-License-Identifier: Apache-2.0
#pragma once
// A tokenizer folder holding GPT-2's first n tokens: the 256 byte tokens and the merges that
// made tokens 256..n-1 (GPT-2's merge of rank r made token 256 + r). A real, loadable tokenizer
// that is smaller than a model's vocabulary.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace servekit::testing {

inline void write_gpt2_vocab_prefix(const std::filesystem::path& gpt2_dir,
                                    const std::filesystem::path& out_dir, int n) {
  std::filesystem::create_directories(out_dir);
  nlohmann::json all;
  std::ifstream(gpt2_dir / "encoder.json") >> all;
  nlohmann::json kept = nlohmann::json::object();
  for (auto it = all.begin(); it != all.end(); ++it)
    if (it.value().get<int>() < n) kept[it.key()] = it.value();
  std::ofstream(out_dir / "vocab.json") << kept.dump();
  std::ifstream merges(gpt2_dir / "vocab.bpe");
  std::ofstream out(out_dir / "merges.txt");
  std::string line;
  std::getline(merges, line);  // #version
  out << line << "\n";
  for (int r = 0; r < n - 256 && std::getline(merges, line); ++r) out << line << "\n";
}

}  // namespace servekit::testing
