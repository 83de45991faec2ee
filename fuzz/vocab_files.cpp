// SPDX-License-Identifier: Apache-2.0
// Any bytes as a tokenizer's vocab.json + merges.txt (split at the first NUL byte): a
// servekit::Error, or a tokenizer that encodes and decodes a fixed text within its vocabulary.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz_file.hpp"
#include "servekit/text/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const uint8_t* nul = std::find(data, data + size, uint8_t(0));
  const std::size_t left = static_cast<std::size_t>(nul - data);
  const auto vocab = fuzz::write_file("vocab.json", data, left);
  const std::size_t rest = left < size ? size - left - 1 : 0;
  const auto merges = fuzz::write_file("merges.txt", left < size ? nul + 1 : data, rest);
  try {
    const auto tok = servekit::text::Gpt2Tokenizer::from_files(vocab, merges);
    const std::string s = "Hello world, it's 2026 <|endoftext|> \xc3\xa9t\xc3\xa9";
    const auto ids = tok.encode(s);
    for (int32_t id : ids)
      if (id < 0 || id >= tok.vocab_size()) std::abort();
    (void)tok.decode(ids);
  } catch (const servekit::Error&) {
  }
  return 0;
}
