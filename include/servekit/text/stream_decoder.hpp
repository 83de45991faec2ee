// SPDX-License-Identifier: Apache-2.0
#pragma once
// Detokenizer for generation: ids arrive one at a time, and a byte-level token may end in the
// middle of a character (an emoji is often 2-4 tokens). push() returns only whole characters and
// holds back a partial one until the tokens that finish it arrive; flush() ends the stream.
#include <cstdint>
#include <string>

#include "servekit/text/gpt2_tokenizer.hpp"
#include "servekit/text/utf8.hpp"

namespace servekit::text {

class StreamDecoder {
 public:
  // The tokenizer must outlive the decoder.
  explicit StreamDecoder(const Gpt2Tokenizer& tokenizer) : tok_(&tokenizer) {}

  // Valid UTF-8: bytes that can never form a character come out as U+FFFD.
  std::string push(int32_t id) {
    pending_ += tok_->token_view(id);
    std::string out;
    take_complete_utf8(pending_, out);
    return out;
  }

  // What is held back: an unfinished character, as one U+FFFD (or "" when nothing is held).
  std::string flush() {
    std::string out = pending_.empty() ? std::string() : std::string(kReplacementChar);
    pending_.clear();
    return out;
  }

  // Bytes held back waiting for the rest of a character (at most 3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Gpt2Tokenizer* tok_;
  std::string pending_;
};

}  // namespace servekit::text
