// SPDX-License-Identifier: Apache-2.0
// Any bytes through GPT-2's tokenizer: every id is in the vocabulary and decode(encode(s))
// gives s back, byte for byte (byte-level BPE loses nothing, invalid UTF-8 included).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "servekit/text/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const auto tok = servekit::text::Gpt2Tokenizer::gpt2();
  const std::string s(reinterpret_cast<const char*>(data), size);
  const auto ids = tok.encode(s);
  for (int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size()) {
      std::fprintf(stderr, "id %d out of range\n", id);
      std::abort();
    }
  if (tok.decode(ids) != s) {
    std::fprintf(stderr, "decode(encode(s)) != s\n");
    std::abort();
  }
  return 0;
}
