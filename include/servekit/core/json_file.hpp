// SPDX-License-Identifier: Apache-2.0
#pragma once
// A JSON file read whole, every failure a servekit::Error naming the file: not a regular file
// (a FIFO would block the open), unreadable, or not JSON (nlohmann's exceptions never escape).
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "servekit/core/error.hpp"
#include "servekit/core/regular_file.hpp"

namespace servekit {

inline nlohmann::json read_json_file(const std::filesystem::path& p) {
  const std::string file = p.string();
  require_regular_file(p);
  std::ifstream in(p);
  if (!in) fail(file, ": cannot open");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(file, ": not valid JSON: ", e.what());
  }
}

}  // namespace servekit
