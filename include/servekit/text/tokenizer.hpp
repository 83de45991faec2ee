// SPDX-License-Identifier: Apache-2.0
#pragma once
// The text/ folder in one include: Gpt2Tokenizer and StreamDecoder.
#include "servekit/text/gpt2_tokenizer.hpp"
#include "servekit/text/stream_decoder.hpp"
