// SPDX-License-Identifier: Apache-2.0
#pragma once
// The loaders read files: a fuzz input becomes one, in a folder of this process's own, in
// memory (/dev/shm) where the machine has it: on a disk-backed /tmp the writes, not the
// loaders, set the pace (hf_config: 1.7 k executions/s there, 5 k in memory).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace fuzz {

// Removed at exit, so a campaign of many runs leaves nothing behind in memory.
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    std::error_code ec;
    const bool shm = std::filesystem::is_directory("/dev/shm", ec) && access("/dev/shm", W_OK) == 0;
    const auto base =
        shm ? std::filesystem::path("/dev/shm") : std::filesystem::temp_directory_path();
    path = base / ("servekit_fuzz_" + std::to_string(getpid()));
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

inline const std::filesystem::path& scratch_dir() {
  static const ScratchDir dir;
  return dir.path;
}

inline std::filesystem::path write_file(const std::string& name, const uint8_t* data,
                                        std::size_t size) {
  const auto path = scratch_dir() / name;
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

}  // namespace fuzz
