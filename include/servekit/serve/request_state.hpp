// SPDX-License-Identifier: Apache-2.0
#pragma once
// RequestState: everything one request carries while it is generated, whichever scheduler runs
// it: its tokens (prompt + generated), the streaming detokenizer, the stop rules, its place in
// its random stream, its timings and, at the end, its Result. The sequential generate() and
// every engine scheduler feed it logits rows and ask it whether the request is finished, so
// there is one implementation of the stop rules.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "servekit/constrain/forced_tokens.hpp"
#include "servekit/constrain/token_mask.hpp"
#include "servekit/core/error.hpp"
#include "servekit/core/row_sampling.hpp"
#include "servekit/serve/request.hpp"
#include "servekit/serve/sampling.hpp"
#include "servekit/text/stream_decoder.hpp"
#include "servekit/text/tokenizer.hpp"

namespace servekit::serve {

using Clock = std::chrono::steady_clock;

inline double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// A tokenizer with fewer tokens than the model's vocabulary is refused before anything runs:
// otherwise the model may sample an id the tokenizer cannot decode, which would fail mid-stream.
// A larger one is fine (tiny test models share GPT-2's); a prompt's ids are checked per request.
inline void require_tokenizer_covers(const text::Gpt2Tokenizer& tok, int model_vocab,
                                     const char* who) {
  if (tok.vocab_size() < model_vocab)
    fail(who, ": the tokenizer ", tok.vocab_file().string(), " has ", tok.vocab_size(),
         " tokens but the model's vocab_size is ", model_vocab, ", so ids ", tok.vocab_size(), "..",
         model_vocab - 1,
         " could be generated and never decoded; use the model's own "
         "vocab.json + merges.txt");
}

class RequestState {
 public:
  // prompt: the request's token ids (checked by the caller against the model); n_positions:
  // the model's context, past which generation ends with finish "context"; vocab: the model's
  // vocabulary size (a constrained request's masks cover it).
  RequestState(uint64_t id, Request req, std::vector<int32_t> prompt,
               const text::Gpt2Tokenizer& tok, int n_positions, int vocab,
               Clock::time_point submitted = Clock::now())
      : req_(std::move(req)),
        tok_(tok),
        detok_(tok),
        n_positions_(n_positions),
        submitted_(submitted) {
    req_.sampling.validate();
    if (req_.stop.max_new_tokens < 0)
      fail("request: max_new_tokens must be >= 0, got ", req_.stop.max_new_tokens);
    if (req_.prompt_logprobs < -1)
      fail("request: prompt_logprobs must be >= 0 (or -1: off), got ", req_.prompt_logprobs);
    eos_ = req_.stop.eos_id >= 0 ? req_.stop.eos_id : tok.eos_id();
    if (req_.json_schema) cons_.emplace(req_.json_schema, constrain::Vocab::of(tok, vocab, eos_));
    for (const auto& s : req_.stop.stop_strings) longest_stop_ = std::max(longest_stop_, s.size());
    res_.id = id;
    res_.prompt_ids = prompt;
    res_.metrics.prompt_tokens = static_cast<int>(prompt.size());
    tokens_ = std::move(prompt);
    last_ = submitted_;
    if (wants_prompt_logprobs())
      for (std::size_t i = 1; i < tokens_.size(); i++)
        res_.prompt_logprobs.push_back({tokens_[i], NAN, {}});
    // Nothing to generate: done now, unless the prompt's log-probabilities are asked for.
    if (req_.stop.max_new_tokens == 0 && !wants_prompt_logprobs()) finish(finish::length);
  }

  uint64_t id() const { return res_.id; }
  const Request& request() const { return req_; }
  // Prompt + generated tokens: what the model must have seen before the next draw.
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int prompt_len() const { return res_.metrics.prompt_tokens; }
  int generated() const { return static_cast<int>(res_.tokens.size()); }
  bool finished() const { return !res_.finish_reason.empty(); }
  const std::string& finish_reason() const { return res_.finish_reason; }
  // Cache rows the request can ever need: the context limit or its last fed token.
  int max_rows() const {
    return std::min(n_positions_, prompt_len() + std::max(0, req_.stop.max_new_tokens - 1));
  }

  // The scheduler ran it for the first time (queue time ends) or took its cache back.
  void scheduled(Clock::time_point t = Clock::now()) {
    if (!scheduled_) res_.metrics.queue_ms = ms_between(submitted_, t), scheduled_ = true;
  }
  void preempted() { res_.metrics.preemptions++; }
  // Speculation verified `proposed` tokens for it in one step and accepted `accepted`.
  void speculated(int proposed, int accepted) {
    res_.metrics.spec_proposed += proposed;
    res_.metrics.spec_accepted += accepted;
  }
  // Admission found its first n tokens cached (what the APIs report is the first admission's).
  void prefix_cached(int n) {
    if (res_.metrics.preemptions == 0) res_.metrics.cached_tokens = n;
  }

  bool wants_prompt_logprobs() const { return req_.prompt_logprobs >= 0; }
  // Whether the n new tokens from position `from` hold a prompt position not scored yet (a
  // recompute after a preemption, or a scheduler without a cache, need not score it again).
  bool scores_prompt(int from, int n) const {
    const int last = prompt_len() - 1;  // positions 0 .. last - 1 are scored
    return wants_prompt_logprobs() && scored_ < last && from < last && from + n > scored_;
  }
  // The logits row after prompt position pos (0 <= pos < prompt_len() - 1): prompt token pos + 1's
  // log-probability and the best alternatives. Rows recomputed after a preemption give the same
  // values again; other rows are ignored.
  void on_prompt_logits(int pos, std::span<const float> logits) {
    if (!wants_prompt_logprobs() || pos < 0 || pos + 1 >= prompt_len()) return;
    PromptToken& t = res_.prompt_logprobs[pos];
    t.top.clear();
    t.logprob = top_logprobs(logits, t.id, req_.prompt_logprobs, t.top);
    scored_ = std::max(scored_, pos + 1);
  }

  // The logits row after the last of tokens(): draws the next token with `sampler`, applies the
  // stop rules, streams. Returns true when the request has finished.
  bool on_logits(std::span<const float> logits, Sampler& sampler,
                 Clock::time_point now = Clock::now()) {
    if (finished()) fail("request ", id(), ": logits after it finished");
    if (req_.stop.max_new_tokens == 0) return finish(finish::length), true;  // the prompt ran
    if (const uint32_t* mask = next_mask()) {
      // Tokens the grammar refuses become -inf, before sampling and the logprobs, as the
      // device's mask_logits does.
      masked_.assign(logits.begin(), logits.end());
      for (std::size_t v = 0; v < masked_.size(); v++)
        if (!(mask[v >> 5] >> (v & 31) & 1)) masked_[v] = -INFINITY;
      logits = masked_;
    }
    const int32_t id = sampler(logits, req_.sampling, static_cast<uint64_t>(generated()));
    return on_pick(id, req_.top_logprobs > 0 ? 0.f : logprob_of(logits, id), logits, now);
  }

  // Where the token was picked on the device (Gpt2::forward_pick): the id (-1: the row had no
  // number above -inf) and its logprob; logits: the row, downloaded only when the request wants
  // its top logprobs (then they and the logprob come from it), else empty.
  bool on_pick(int32_t id, float logprob, std::span<const float> logits,
               Clock::time_point now = Clock::now()) {
    if (finished()) fail("request ", this->id(), ": a token after it finished");
    if (req_.stop.max_new_tokens == 0) return finish(finish::length), true;  // the prompt ran
    if (id < 0) fail("sampling: every one of the logits is NaN or -inf");
    if (req_.top_logprobs > 0 && logits.empty())
      fail("request ", this->id(), ": top logprobs asked for, but no logits came with the token");
    GeneratedToken g{};
    g.id = id;
    g.logprob =
        req_.top_logprobs > 0 ? top_logprobs(logits, id, req_.top_logprobs, g.top) : logprob;
    g.ms = ms_between(last_, now);
    if (res_.tokens.empty())
      res_.metrics.ttft_ms = ms_between(submitted_, now);
    else
      res_.metrics.gaps_ms.push_back(g.ms);
    last_ = now;
    res_.tokens.push_back(std::move(g));
    tokens_.push_back(res_.tokens.back().id);
    return on_token(res_.tokens.back());
  }

  // A constrained request's mask of its next token ((vocab + 31) / 32 words, bit v: token v
  // allowed), computed with the tokens it has left; null if it is not constrained. Where the
  // grammar forces the text, the mask holds the forced token alone (constrain/forced_tokens.hpp).
  const uint32_t* next_mask() {
    if (!cons_) return nullptr;
    if ((forcing_ = forced_.next(*cons_, tok_, tokens_left(), generated())) >= 0) {
      one_.assign(cons_->vocab().words(), 0u);
      one_[forcing_ >> 5] = 1u << (forcing_ & 31);
      return one_.data();
    }
    return cons_->mask(tokens_left()).data();
  }

  // Jump-forward: appends the tokens the grammar forces next as the steps that would draw each
  // under its one-token mask would (the same ids, logprob 0, and the same random draws after
  // them, which are numbered by token), without a forward pass each; the engine feeds them to
  // the model in its next step. Requests that want top logprobs take them a step each. Returns
  // the tokens appended; the request may have finished.
  int jump(Clock::time_point now = Clock::now()) {
    if (!cons_ || req_.top_logprobs > 0) return 0;
    int n = 0;
    while (!finished() &&
           (forcing_ = forced_.next(*cons_, tok_, tokens_left(), generated())) >= 0) {
      on_pick(forcing_, 0.f, {}, now);
      n++;
    }
    res_.metrics.forced_tokens += n;
    return n;
  }
  const constrain::Constraint* constraint() const { return cons_ ? &*cons_ : nullptr; }

  // This request's parameters for the device sampler's next draw, or (speculation) for the
  // draw `ahead` tokens after it.
  RowSampling sampling_row(int ahead = 0) const {
    const SamplingParams& p = req_.sampling;
    return {.seed = p.seed,
            .index = static_cast<uint64_t>(generated() + ahead),
            .temperature = p.temperature,
            .top_p = p.top_p,
            .top_k = p.top_k};
  }

  // Ends the request now (cancelled, error, ...): what was generated stays in the result.
  void finish(std::string_view reason, std::string error = {}) {
    if (finished()) return;
    res_.finish_reason = std::string(reason);
    res_.error = std::move(error);
    if (reason != finish::cancelled && reason != finish::error && !res_.tokens.empty())
      res_.tokens.back().ends = true;  // before it is streamed: a server marks its last event
    if (reason != finish::stop && reason != finish::error) {
      res_.text += detok_.flush();
      if (reason != finish::cancelled && !res_.tokens.empty()) emit(res_.text.size());
    }
    const auto now = Clock::now();
    auto& m = res_.metrics;
    m.generated_tokens = generated();
    m.e2e_ms = ms_between(submitted_, now);
    if (m.gaps_ms.size() > 0)
      m.tpot_ms = std::accumulate(m.gaps_ms.begin(), m.gaps_ms.end(), 0.0) / m.gaps_ms.size();
  }

  // The result leaves the engine now (a static batch holds it until the batch ends).
  void delivered(Clock::time_point now = Clock::now()) {
    res_.metrics.e2e_ms = ms_between(submitted_, now);
  }

  Result take_result() { return std::move(res_); }
  const Result& result() const { return res_; }

 private:
  bool on_token(const GeneratedToken& g) {
    if (cons_) {
      // A token outside the mask (a device that ignored it) is an error, never invalid JSON.
      if (forcing_ >= 0 ? g.id != forcing_ : !cons_->allowed(g.id))
        fail("request ", id(), ": token ", g.id, " is not allowed by its JSON schema here");
      forced_.wrote(g.id);
      cons_->advance(g.id, g.id == eos_ ? std::string_view() : tok_.token_view(g.id));
    }
    if ((req_.stop.stop_at_eos || cons_) && g.id == eos_) {
      finish(finish::eos);
      return true;
    }
    res_.text += detok_.push(g.id);
    // A stop string may straddle tokens: search only the tail that could hold a new match.
    const std::size_t from =
        res_.text.size() > longest_stop_ + 64 ? res_.text.size() - longest_stop_ - 64 : 0;
    std::optional<std::size_t> cut;
    for (const auto& s : req_.stop.stop_strings) {
      if (s.empty()) continue;
      auto p = res_.text.find(s, from);
      if (p != std::string::npos && (!cut || p < *cut)) cut = p;
    }
    if (cut) {
      res_.text.resize(std::max(*cut, shown_));
      finish(finish::stop);
      emit(res_.text.size());
      return true;
    }
    // Hold back a tail that could still become a stop string.
    std::size_t safe = res_.text.size();
    for (const auto& s : req_.stop.stop_strings)
      for (std::size_t k = std::min(s.size() - 1, res_.text.size()); k > 0; k--)
        if (res_.text.compare(res_.text.size() - k, k, s, 0, k) == 0) {
          safe = std::min(safe, res_.text.size() - k);
          break;
        }
    // Decide the end before streaming, so that the last token's call carries the flushed tail
    // too: one call per token. Complete JSON ends the request as end-of-text would.
    if (cons_ && cons_->complete()) {
      finish(finish::eos);
      return true;
    }
    if (generated() >= req_.stop.max_new_tokens) {
      finish(finish::length);
      return true;
    }
    // The next token would be fed at position tokens_.size() - 1: past the context.
    if (static_cast<int>(tokens_.size()) > n_positions_) {
      finish(finish::context);
      return true;
    }
    if (!emit(safe)) {
      finish(finish::cancelled);
      return true;
    }
    return false;
  }

  int tokens_left() const {
    return std::min(req_.stop.max_new_tokens - generated(),
                    n_positions_ + 1 - static_cast<int>(tokens_.size()));
  }

  // Hands the newest token and res_.text[shown_, upto) (maybe empty: text held back) to the
  // stream callback, once per token; false if it asked to cancel.
  bool emit(std::size_t upto) {
    if (!req_.on_piece || res_.tokens.size() <= streamed_) return true;
    upto = std::max(upto, shown_);
    const bool go = req_.on_piece(std::string_view(res_.text).substr(shown_, upto - shown_),
                                  res_.tokens.back());
    shown_ = upto;
    streamed_ = res_.tokens.size();
    return go;
  }

  // Token id's log-probability in logits; the best k alternatives into top.
  float top_logprobs(std::span<const float> logits, int32_t id, int k,
                     std::vector<TokenLogprob>& top) {
    log_softmax(logits, logp_);
    const int V = static_cast<int>(logits.size());
    k = std::min(k, V);
    if (k <= 0) return logp_[id];
    std::vector<int32_t> idx(V);
    std::iota(idx.begin(), idx.end(), 0);
    // NaN sorts last: a NaN log-probability is never reported as a likely alternative.
    auto key = [&](int32_t i) { return logp_[i] == logp_[i] ? logp_[i] : -INFINITY; };
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
      return key(a) > key(b) || (key(a) == key(b) && a < b);
    });
    for (int i = 0; i < k; i++) top.push_back({idx[i], logp_[idx[i]]});
    return logp_[id];
  }

  Request req_;
  const text::Gpt2Tokenizer& tok_;
  Result res_;
  std::vector<int32_t> tokens_;  // prompt + generated
  text::StreamDecoder detok_;
  int32_t eos_ = -1;
  int n_positions_;
  std::size_t longest_stop_ = 0, shown_ = 0;  // shown_: bytes of text already streamed
  std::size_t streamed_ = 0;                  // tokens already handed to on_piece
  Clock::time_point submitted_, last_;
  bool scheduled_ = false;
  int scored_ = 0;           // prompt positions 0 .. scored_ - 1 have their log-probabilities
  std::vector<float> logp_;  // only with top or prompt logprobs
  std::optional<constrain::Constraint> cons_;  // a request with a JSON schema
  std::vector<float> masked_;                  // its masked logits (host sampling)
  constrain::ForcedRun forced_;                // the tokens its grammar forces next
  int32_t forcing_ = -1;                       // the last mask was this forced token alone
  std::vector<uint32_t> one_;                  // that mask
};

}  // namespace servekit::serve
