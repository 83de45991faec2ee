// SPDX-License-Identifier: Apache-2.0
#pragma once
// Speculation's second proposer: a draft model. A smaller GPT-2 with the same vocabulary
// (DistilGPT-2 or GPT-2 drafting for GPT-2 medium / large / xl) writes k tokens ahead of each
// speculating sequence, greedily, and the target verifies them in one step
// (serve/speculation.hpp), so the draft decides only how many tokens a step yields, never which.
//
// The draft keeps its own contiguous KV cache, a slot per request. What a slot holds is the
// tokens it was fed (`fed`); at the next call the common prefix of `fed` and the request's
// tokens is all that is kept, so rejected proposals, a preemption or a jump-forward need no
// message: the rows after the prefix are written over. One call runs, for every asking
// sequence together,
//   catch-up  the tokens it has not seen (a new request's whole prompt, in chunks of at most
//             kChunk tokens a forward; after a verify, the accepted tokens and the drawn one),
//             whose last row's argmax is proposal 1;
//   k - 1     decode forwards, each feeding the previous proposal.
//
//   tokens:   p0 p1 p2 ... pL-1 | fed: p0 .. pL-3 x   (x: a rejected proposal)
//   catch-up: pL-2 pL-1 -> d1;  then d1 -> d2, d2 -> d3, ...
#include <algorithm>
#include <atomic>
#include <memory>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/kv/cache.hpp"
#include "servekit/model/batch.hpp"

namespace servekit::serve {

// One sequence's ask: k tokens to follow `tokens` (its prompt and generated tokens).
struct DraftAsk {
  uint64_t id = 0;  // the request, which keeps its slot in the draft's cache across steps
  std::span<const int32_t> tokens;
  int k = 0;
  std::vector<int32_t>* out = nullptr;  // cleared, then up to k tokens
};

// What the engine calls, whatever the draft's composition (Speculation::draft).
class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;
  virtual int vocab() const = 0;
  // Writes each ask's proposals: k tokens, fewer where the draft's context ends or (asks beyond
  // its slots) none.
  virtual void propose(std::span<DraftAsk> asks) = 0;
  // The request ended: its slot is free.
  virtual void forget(uint64_t id) = 0;
  // An engine takes a drafter for its life: request ids name slots only within one engine.
  void attach() {
    if (attached_.exchange(true)) fail("engine: the draft model is already in another engine");
  }
  void detach() { attached_ = false; }
  long forwards() const { return forwards_; }  // the draft's forward passes so far

 protected:
  long forwards_ = 0;

 private:
  std::atomic<bool> attached_{false};
};

// A draft of Model's composition (any weight format and backend, a contiguous KV layout).
template <class Model>
class DraftModel final : public Drafter {
 public:
  static constexpr int V = Model::Dims::vocab;
  static constexpr int kChunk = 256;  // catch-up tokens per forward at most
  static_assert(!kv::is_paged<typename Model::Config::Kv>,
                "a draft model keeps a contiguous cache: its slots are rewound, never shared");

  // slots: sequences it drafts for at once (more asks than slots: the least recently used slot
  // is taken over); max_len: its cache's rows per slot. A model passed by reference must
  // outlive the drafter.
  DraftModel(std::shared_ptr<Model> model, int slots, int max_len = Model::Dims::n_positions)
      : model_(std::move(model)),
        cache_(model_->make_cache(check_slots(slots), max_len)),
        slots_(slots),
        max_len_(max_len) {
    for (int s = 0; s < slots; s++) cache_.acquire();
    model_->reserve(std::max(kChunk, slots), slots, max_len);
    for (auto& s : slots_) s.fed.reserve(max_len);
  }

  DraftModel(Model& model, int slots, int max_len = Model::Dims::n_positions)
      : DraftModel(std::shared_ptr<Model>(&model, [](Model*) {}), slots, max_len) {}

  std::string name() const override { return Model::name(); }
  int vocab() const override { return V; }

  void propose(std::span<DraftAsk> asks) override {
    clock_++;
    // Each ask's slot and what it must feed; asks that find no slot propose nothing.
    live_.clear();
    for (DraftAsk& a : asks) {
      a.out->clear();
      const int len = static_cast<int>(a.tokens.size());
      const int k = std::min(a.k, max_len_ - len + 1);  // the draft feeds len + k - 1 tokens
      if (k <= 0 || len < 1) continue;
      const int s = slot_for(a.id);
      if (s < 0) continue;
      Slot& sl = slots_[s];
      sl.used = clock_;
      const auto keep =
          std::mismatch(sl.fed.begin(), sl.fed.end(), a.tokens.begin(), a.tokens.end()).first -
          sl.fed.begin();
      sl.fed.resize(std::min<std::ptrdiff_t>(keep, len - 1));  // the last token brings logits
      live_.push_back({&a, s, k});
    }
    catch_up();
    for (int round = 1;; round++) {
      bool any = false;
      for (Live& l : live_)
        any |= l.ask->out->size() == static_cast<std::size_t>(round) && l.k > round;
      if (!any) break;
      begin_step();
      for (Live& l : live_) {
        auto& out = *l.ask->out;
        if (out.size() != static_cast<std::size_t>(round) || l.k <= round) continue;
        add(l, std::span<const int32_t>(&out.back(), 1));
      }
      run_step();
    }
  }

  // The tokens whose keys and values request id's slot holds (empty: it has none).
  std::span<const int32_t> held(uint64_t id) const {
    auto it = where_.find(id);
    return it == where_.end() ? std::span<const int32_t>() : slots_[it->second].fed;
  }

  void forget(uint64_t id) override {
    auto it = where_.find(id);
    if (it == where_.end()) return;
    slots_[it->second].id = kFree;
    slots_[it->second].fed.clear();
    where_.erase(it);
  }

 private:
  static constexpr uint64_t kFree = ~uint64_t{0};
  struct Slot {
    uint64_t id = kFree;
    uint64_t used = 0;
    std::vector<int32_t> fed;  // tokens whose keys and values the slot holds
  };
  struct Live {
    DraftAsk* ask;
    int slot, k;
  };

  static int check_slots(int slots) {
    if (slots < 1) fail("draft model: slots must be >= 1, got ", slots);
    return slots;
  }

  // The slot of request id: its own, a free one, or the least recently used one not asked for
  // in this call; -1 when every slot is asked for.
  int slot_for(uint64_t id) {
    if (auto it = where_.find(id); it != where_.end()) return it->second;
    int best = -1;
    for (int s = 0; s < static_cast<int>(slots_.size()); s++) {
      if (slots_[s].used == clock_) continue;  // asked for in this call
      if (slots_[s].id == kFree) {
        best = s;
        break;
      }
      if (best < 0 || slots_[s].used < slots_[best].used) best = s;
    }
    if (best < 0) return -1;
    if (slots_[best].id != kFree) where_.erase(slots_[best].id);
    slots_[best].id = id, slots_[best].fed.clear();
    where_[id] = best;
    return best;
  }

  // Feeds every live ask's unseen tokens, kChunk a forward at most; an ask whose last token went
  // in gets its first proposal.
  void catch_up() {
    while (true) {
      begin_step();
      int budget = std::max(kChunk, static_cast<int>(live_.size()));
      for (Live& l : live_) {
        const auto& fed = slots_[l.slot].fed;
        const int have = static_cast<int>(fed.size());
        const int need = static_cast<int>(l.ask->tokens.size()) - have;
        if (need <= 0 || !l.ask->out->empty() || budget <= 0) continue;
        const int n = std::min(need, budget);
        budget -= n;
        add(l, l.ask->tokens.subspan(static_cast<std::size_t>(have), static_cast<std::size_t>(n)));
      }
      if (steps_.empty()) return;
      run_step();
    }
  }

  void begin_step() { tokens_.clear(), steps_.clear(), who_.clear(); }
  void add(Live& l, std::span<const int32_t> t) {
    auto& fed = slots_[l.slot].fed;
    steps_.push_back({.slot = l.slot,
                      .n_past = static_cast<int32_t>(fed.size()),
                      .n_new = static_cast<int32_t>(t.size())});
    tokens_.insert(tokens_.end(), t.begin(), t.end());
    fed.insert(fed.end(), t.begin(), t.end());
    who_.push_back(&l);
  }
  // Runs the built step; a sequence whose fed tokens now end where its ask's tokens (and
  // proposals) do takes its row's argmax as its next proposal.
  void run_step() {
    const model::Batch b{.tokens = tokens_, .seqs = steps_};
    const int S = static_cast<int>(steps_.size());
    picks_.resize(S);
    if constexpr (Model::kDeviceSampling) {
      rows_.assign(S, RowSampling{});  // temperature 0: the argmax, ties to the lowest id
      lp_.resize(S);
      model_->forward_pick(cache_, b, rows_, picks_, lp_);
    } else {
      model_->forward(cache_, b, logits_);
      for (int i = 0; i < S; i++) {
        const float* row = logits_.data() + static_cast<std::size_t>(i) * V;
        picks_[i] = static_cast<int32_t>(std::max_element(row, row + V) - row);
      }
    }
    forwards_++;
    for (int i = 0; i < S; i++) {
      Live& l = *who_[i];
      auto& out = *l.ask->out;
      const std::size_t fed = slots_[l.slot].fed.size();
      if (fed != l.ask->tokens.size() + (out.empty() ? 0 : out.size())) continue;  // mid-prompt
      if (picks_[i] < 0) {  // no finite logit: propose nothing more
        l.k = static_cast<int>(out.size());
        continue;
      }
      out.push_back(picks_[i]);
    }
  }

  std::shared_ptr<Model> model_;
  typename Model::Cache cache_;
  std::vector<Slot> slots_;
  int max_len_;
  uint64_t clock_ = 0;
  std::unordered_map<uint64_t, int> where_;
  std::vector<Live> live_;
  std::vector<int32_t> tokens_, picks_;
  std::vector<model::SeqStep> steps_;
  std::vector<Live*> who_;
  std::vector<float> logits_, lp_;
  std::vector<RowSampling> rows_;
};

}  // namespace servekit::serve
