// SPDX-License-Identifier: Apache-2.0
#pragma once
// Forced tokens: where a grammar leaves exactly one text to write next (`"name": ` after the
// only key left, the `}` that closes it, a const), which tokens write it.
//
// Any split of that text into tokens keeps it valid, and a model left free among them would
// pick one at random; so the request takes the text's canonical GPT-2 tokens, the ones the
// tokenizer gives the text itself, one per step under a mask of that token alone
// (serve/request_state.hpp). As every such step has one choice, the engine may also append
// them without a forward pass each (jump-forward, RequestState::jump) and feed them in one
// step, with the very same tokens and logprobs (0: a one-token mask leaves probability 1).
//
// The text's last pre-token is left out unless nothing may follow it: the free text after it
// may join it (a forced `"pre` then a chosen `fix"` is the single token `"prefix` in GPT-2's
// split), so the model writes it under the grammar's full mask. The first pre-token starts at
// the token boundary the model chose; canonical is thus "canonical from here", the best a
// request can do whose earlier tokens were the model's choice.
#include <cstdint>
#include <string_view>
#include <vector>

#include "servekit/constrain/token_mask.hpp"
#include "servekit/text/gpt2_tokenizer.hpp"
#include "servekit/text/pretokenize.hpp"

namespace servekit::constrain {

// out: the forced tokens at c's state, in order (empty: the next token is a choice). Stops
// before a token the mask could not hold (end-of-text written out in a const, an id past the
// model's vocabulary).
inline void forced_tokens(const Constraint& c, const text::Gpt2Tokenizer& tok,
                          std::vector<int32_t>& out) {
  out.clear();
  const Constraint::Forced f = c.forced_text();
  std::string_view text = f.text;
  if (!f.whole) {
    std::size_t last = 0;
    text::for_each_pretoken(text, [&](std::string_view p) { last = p.data() - text.data(); });
    text = text.substr(0, last);
  }
  if (text.empty()) return;
  for (int32_t id : tok.encode(text)) {
    if (id == c.vocab().eos || id < 0 || id >= c.vocab().V || tok.token_view(id).empty()) break;
    out.push_back(id);
  }
}

// A request's run of forced tokens: planned at the state where the last run was used up,
// consumed as its tokens are written. Both ways of writing them (a step each under a one-token
// mask, or appended at once) ask next() at the same token counts, so they plan the same runs.
class ForcedRun {
 public:
  // The forced token due at c's state, n tokens into the request, with `left` tokens left; -1:
  // none (a choice, or a token after which the text could not finish in left - 1 more, where
  // the budget's mask decides instead).
  int32_t next(const Constraint& c, const text::Gpt2Tokenizer& tok, int left, int n) {
    if (at_ == run_.size() && planned_ != n) {
      forced_tokens(c, tok, run_);
      at_ = 0, planned_ = n;
    }
    if (at_ == run_.size()) return -1;
    const int32_t t = run_[at_];
    return c.finish_after(tok.token_view(t)) <= left - 1 ? t : -1;
  }
  // Token t was written: the run goes on if it was the next one, else it is over.
  void wrote(int32_t t) {
    if (at_ < run_.size() && run_[at_] == t)
      at_++;
    else
      run_.clear(), at_ = 0;
  }

 private:
  std::vector<int32_t> run_;
  std::size_t at_ = 0;
  int planned_ = -1;  // the token count run_ was planned at
};

}  // namespace servekit::constrain
