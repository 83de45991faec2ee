// SPDX-License-Identifier: Apache-2.0
#pragma once
// Example helpers: CSV beside a gnuplot PNG. Plotting is best-effort (gnuplot may be absent on
// a user's machine); the CSV is always written.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace servekit::examples {

// Runs a gnuplot script; returns false (and says so) when gnuplot is missing or fails.
inline bool gnuplot(const std::filesystem::path& script_path, const std::string& script) {
  std::ofstream(script_path) << script;
  const std::string cmd = "gnuplot '" + script_path.string() + "' 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr,
                 "(gnuplot not available or failed: no plot; the CSV has the data; script: %s)\n",
                 script_path.c_str());
    return false;
  }
  return true;
}

}  // namespace servekit::examples
