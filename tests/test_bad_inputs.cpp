// SPDX-License-Identifier: Apache-2.0
// Hostile and careless inputs to the loaders: each one gets a servekit::Error naming the file
// and field, never a crash (deep nesting), a hang (FIFOs) or an escaping library exception
// (numbers out of range).
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "servekit/io/safetensors.hpp"
#include "servekit/model/hf_config.hpp"
#include "servekit/model/load_gpt2.hpp"
#include "servekit/text/tokenizer.hpp"
#include "support/safetensors_writer.hpp"

namespace sk = servekit;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

std::string nested(int depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

void write_safetensors(const fs::path& p, const std::string& header) {
  std::ofstream f(p, std::ios::binary);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; i++) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
  f << header;
}

}  // namespace

TEST_CASE("deeply nested JSON in any printed field is an error, not a stack overflow", "[bad]") {
  sk::testing::TempDir tmp;
  const std::string deep = nested(100000);
  const auto st = tmp / "model.safetensors";
  const std::pair<const char*, std::string> cases[] = {
      {"shape", R"({"a": {"dtype": "F32", "shape": )" + deep + R"(, "data_offsets": [0, 4]}})"},
      {"dtype", R"({"a": {"dtype": )" + deep + R"(, "shape": [1], "data_offsets": [0, 4]}})"},
      {"data_offsets", R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": )" + deep + "}}"}};
  for (const auto& [field, h] : cases) {
    INFO(field);
    write_safetensors(st, h + "    ");
    REQUIRE_THROWS_WITH(sk::io::SafetensorsFile::open(st),
                        Contains("model.safetensors") && Contains(field));
  }
  std::ofstream(tmp / "config.json") << R"({"model_type": "gpt2", "n_layer": )" << deep << "}";
  REQUIRE_THROWS_WITH(
      sk::model::read_gpt2_config(tmp / "config.json"),
      Contains("config.json") && Contains("'n_layer'") && Contains("an array of 1 values"));
  std::ofstream(tmp / "vocab.json") << R"({"a": )" << deep << "}";
  std::ofstream(tmp / "merges.txt") << "#version: 0.2\n";
  REQUIRE_THROWS_WITH(sk::text::Gpt2Tokenizer::from_dir(tmp.path()),
                      Contains("vocab.json") && Contains("non-integer id"));
  std::ofstream(tmp / "model.safetensors.index.json")
      << R"({"weight_map": {"wte.weight": )" << deep << "}}";
  fs::remove(st);
  std::ofstream(tmp / "config.json", std::ios::trunc)
      << R"({"model_type": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 8, "vocab_size": 11,
            "n_positions": 6})";
  REQUIRE_THROWS_WITH(sk::model::load_gpt2_any(tmp.path()),
                      Contains("weight_map entry 'wte.weight'") && Contains("not a file name"));
}

TEST_CASE("a number out of range (1e999) is a servekit::Error naming the file", "[bad]") {
  sk::testing::TempDir tmp;
  std::ofstream(tmp / "config.json") << R"({"model_type": "gpt2", "n_layer": 1e999})";
  REQUIRE_THROWS_AS(sk::model::read_gpt2_config(tmp / "config.json"), sk::Error);
  REQUIRE_THROWS_WITH(sk::model::read_gpt2_config(tmp / "config.json"), Contains("config.json"));
  write_safetensors(tmp / "x.safetensors",
                    R"({"a": {"dtype": "F32", "shape": [1e999], "data_offsets": [0, 4]}})");
  REQUIRE_THROWS_AS(sk::io::SafetensorsFile::open(tmp / "x.safetensors"), sk::Error);
}

TEST_CASE("a FIFO or a directory in place of a file is refused at once, by name", "[bad]") {
  sk::testing::TempDir tmp;
  REQUIRE(::mkfifo((tmp / "config.json").c_str(), 0600) == 0);
  REQUIRE_THROWS_WITH(sk::model::read_gpt2_config(tmp / "config.json"),
                      Contains("config.json: is a FIFO"));
  REQUIRE(::mkfifo((tmp / "model.safetensors").c_str(), 0600) == 0);
  REQUIRE_THROWS_WITH(sk::io::SafetensorsFile::open(tmp / "model.safetensors"),
                      Contains("model.safetensors: is a FIFO"));
  REQUIRE(::mkfifo((tmp / "vocab.json").c_str(), 0600) == 0);
  std::ofstream(tmp / "merges.txt") << "#version: 0.2\n";
  REQUIRE_THROWS_WITH(sk::text::Gpt2Tokenizer::from_files(tmp / "vocab.json", tmp / "merges.txt"),
                      Contains("vocab.json: is a FIFO"));
  fs::create_directories(tmp / "dir" / "config.json");
  REQUIRE_THROWS_WITH(sk::model::read_gpt2_config(tmp / "dir" / "config.json"),
                      Contains("config.json: is a directory"));
}

TEST_CASE("values a float or int64 cannot hold are refused, not rounded or overflowed", "[bad]") {
  sk::testing::TempDir tmp;
  for (const char* eps : {"1e-50", "1e300"}) {
    INFO(eps);
    std::ofstream(tmp / "config.json", std::ios::trunc)
        << R"({"model_type": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 8, "vocab_size": 11,
              "n_positions": 6, "layer_norm_epsilon": )"
        << eps << "}";
    REQUIRE_THROWS_WITH(sk::model::read_gpt2_config(tmp / "config.json"),
                        Contains("'layer_norm_epsilon'") && Contains("range of a float"));
  }
  // 1e-30 is a small but real float: still accepted.
  std::ofstream(tmp / "config.json", std::ios::trunc)
      << R"({"model_type": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 8, "vocab_size": 11,
            "n_positions": 6, "layer_norm_epsilon": 1e-30})";
  CHECK(sk::model::read_gpt2_config(tmp / "config.json").layer_norm_epsilon > 0);
  // An empty tensor whose other dims multiply past int64.
  write_safetensors(tmp / "x.safetensors",
                    R"({"a": {"dtype": "F32", "shape": [3, 4611686018427387904, 0], )"
                    R"("data_offsets": [0, 0]}})");
  REQUIRE_THROWS_WITH(sk::io::SafetensorsFile::open(tmp / "x.safetensors"),
                      Contains("x.safetensors") && Contains("more than 2^63 elements"));
  // Empty tensors are fine otherwise.
  write_safetensors(tmp / "y.safetensors",
                    R"({"a": {"dtype": "F32", "shape": [5, 0], "data_offsets": [0, 0]}})");
  CHECK(sk::io::SafetensorsFile::open(tmp / "y.safetensors").at("a").numel() == 0);
}

TEST_CASE("a tensor defined twice in a safetensors header is refused, not read as the last",
          "[bad]") {
  sk::testing::TempDir tmp;
  write_safetensors(tmp / "d.safetensors",
                    R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}, )"
                    R"("w": {"dtype": "F16", "shape": [0], "data_offsets": [0, 0]}})");
  REQUIRE_THROWS_WITH(sk::io::SafetensorsFile::open(tmp / "d.safetensors"),
                      Contains("d.safetensors") && Contains("tensor \"w\" is defined twice"));
  // The same key at a deeper level (inside two tensors' entries) is not a duplicate.
  write_safetensors(tmp / "ok.safetensors",
                    R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}, )"
                    R"("b": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}})");
  CHECK(sk::io::SafetensorsFile::open(tmp / "ok.safetensors").entries().size() == 2);
}
