// SPDX-License-Identifier: Apache-2.0
// Any bytes as a model's config.json: a servekit::Error, or a config whose fields are in range.
#include <cstdint>
#include <cstdlib>

#include "fuzz_file.hpp"
#include "servekit/model/hf_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const auto path = fuzz::write_file("config.json", data, size);
  try {
    const auto c = servekit::model::read_gpt2_config(path);
    if (c.n_layer <= 0 || c.n_head <= 0 || c.n_embd <= 0 || c.vocab_size <= 0) std::abort();
  } catch (const servekit::Error&) {
  }
  return 0;
}
