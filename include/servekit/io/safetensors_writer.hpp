// SPDX-License-Identifier: Apache-2.0
#pragma once
// Writing .safetensors files (the layout io/safetensors.hpp reads): an 8-byte little-endian
// header length, the JSON header padded with spaces to a multiple of 8 bytes, then the tensors'
// bytes in the header's order. Float32 only: what servekit writes is adapters and test data.
#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "servekit/core/error.hpp"

namespace servekit::io {

struct F32Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::span<const float> data;
};

inline void write_safetensors(const std::filesystem::path& path,
                              std::span<const F32Tensor> tensors) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  h["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  for (const auto& t : tensors) {
    uint64_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    if (n != t.data.size())
      fail(path.string(), ": tensor '", t.name, "' has ", t.data.size(), " values for its shape");
    h[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {off, off + 4 * n}}};
    off += 4 * n;
  }
  std::string hs = h.dump();
  hs.append((8 - hs.size() % 8) % 8, ' ');
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail(path.string(), ": cannot create the file");
  const uint64_t len = hs.size();
  unsigned char le[8];
  for (int i = 0; i < 8; i++) le[i] = static_cast<unsigned char>(len >> (8 * i));
  f.write(reinterpret_cast<const char*>(le), 8);
  f.write(hs.data(), static_cast<std::streamsize>(hs.size()));
  static_assert(std::endian::native == std::endian::little, "servekit writes little-endian data");
  for (const auto& t : tensors)
    f.write(reinterpret_cast<const char*>(t.data.data()),
            static_cast<std::streamsize>(t.data.size_bytes()));
  if (!f.flush()) fail(path.string(), ": write failed (disk full?)");
}

}  // namespace servekit::io
