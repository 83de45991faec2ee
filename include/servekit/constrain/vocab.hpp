// SPDX-License-Identifier: Apache-2.0
#pragma once
// The tokens a mask ranges over (token_mask.hpp), sorted by their bytes so that a walk in order
// is a walk of their trie, and what each does inside a JSON string (string_tokens.hpp). Made
// once per tokenizer file and vocabulary size, shared by every grammar.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "servekit/constrain/sorted_strings.hpp"
#include "servekit/constrain/string_tokens.hpp"
#include "servekit/core/error.hpp"
#include "servekit/text/gpt2_tokenizer.hpp"

namespace servekit::constrain {

// The end-of-text token is not among the sorted tokens: it is allowed where the text may end,
// and only then.
struct Vocab {
  int V = 0;                 // mask bits: tokens 0..V-1
  int32_t eos = -1;          // the end-of-text token
  std::vector<int32_t> ids;  // (n) the token of each sorted string
  SortedStrings tokens;      // (n) their bytes, in byte order
  StringTokens in_string;

  int words() const { return (V + 31) / 32; }

  // Built on first use (~70 ms for GPT-2's).
  static std::shared_ptr<const Vocab> of(const text::Gpt2Tokenizer& tok, int V, int32_t eos) {
    static std::mutex mu;
    static std::map<std::tuple<std::string, int, int, int32_t>, std::shared_ptr<const Vocab>> made;
    if (V <= 0 || V > tok.vocab_size())
      fail("constrain: a vocabulary of ", V, " tokens, but the tokenizer has ", tok.vocab_size());
    const auto key = std::make_tuple(tok.vocab_file().string(), tok.vocab_size(), V, eos);
    std::lock_guard lock(mu);
    auto& slot = made[key];
    if (!slot) slot = build(tok, V, eos);
    return slot;
  }

  static std::shared_ptr<const Vocab> build(const text::Gpt2Tokenizer& tok, int V, int32_t eos) {
    auto v = std::make_shared<Vocab>();
    v->V = V, v->eos = eos;
    std::vector<std::pair<int32_t, std::string_view>> toks;
    for (int32_t i = 0; i < V; i++)
      if (i != eos && !tok.token_view(i).empty()) toks.emplace_back(i, tok.token_view(i));
    std::sort(toks.begin(), toks.end(),
              [](const auto& a, const auto& b) { return a.second < b.second; });
    std::vector<std::string_view> sorted;
    for (const auto& [id, bytes] : toks) v->ids.push_back(id), sorted.push_back(bytes);
    v->tokens = SortedStrings::of(sorted);
    v->in_string = StringTokens::of(toks, V);
    return v;
  }
};

}  // namespace servekit::constrain
