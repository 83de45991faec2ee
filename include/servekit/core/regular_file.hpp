// SPDX-License-Identifier: Apache-2.0
#pragma once
// Checked before a file is opened: opening a FIFO blocks until a writer comes (forever, for a
// model folder someone replaced with one), and reading a directory gives a message that names
// no path. stat() does neither.
#include <filesystem>
#include <system_error>

#include "servekit/core/error.hpp"

namespace servekit {

inline void require_regular_file(const std::filesystem::path& p) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  if (ec || st.type() == fs::file_type::not_found || st.type() == fs::file_type::regular) return;
  const char* kind = st.type() == fs::file_type::directory ? "a directory"
                     : st.type() == fs::file_type::fifo    ? "a FIFO (named pipe)"
                     : st.type() == fs::file_type::socket  ? "a socket"
                                                           : "a device or special file";
  fail(p.string(), ": is ", kind, ", not a regular file");
}

}  // namespace servekit
