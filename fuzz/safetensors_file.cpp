// SPDX-License-Identifier: Apache-2.0
// Any bytes as a .safetensors file: either a servekit::Error naming what is wrong, or entries
// whose bytes lie inside the file and read back as floats.
#include <cstdint>

#include "fuzz_file.hpp"
#include "servekit/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const auto path = fuzz::write_file("model.safetensors", data, size);
  try {
    const auto f = servekit::io::SafetensorsFile::open(path);
    for (const auto& e : f.entries())
      if (e.numel() <= (1 << 16)) (void)servekit::io::read_as_f32(e);
  } catch (const servekit::Error&) {
  }
  return 0;
}
