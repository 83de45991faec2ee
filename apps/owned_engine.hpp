// SPDX-License-Identifier: Apache-2.0
#pragma once
// A model and its engine, owned together and seen as a serve::EngineRef: what a composition's
// translation unit hands to main() for the HTTP server.
#include <utility>

#include "servekit/model/gpt2_tensors.hpp"
#include "servekit/serve/engine.hpp"
#include "servekit/serve/engine_ref.hpp"

namespace servekit::cli {

template <class Model, class Sched>
class OwnedEngine final : public serve::EngineRef {
 public:
  using Engine = serve::Engine<Model, Sched>;
  OwnedEngine(model::Gpt2Tensors t, const text::Gpt2Tokenizer& tok, serve::EngineOptions eo)
      : model_(std::move(t)), engine_(model_, tok, eo), ref_(engine_) {}

  Engine& engine() { return engine_; }
  serve::RequestHandle submit(serve::Request r) override { return ref_.submit(std::move(r)); }
  bool cancel(uint64_t id) override { return ref_.cancel(id); }
  serve::EngineStats stats() const override { return ref_.stats(); }
  const serve::EngineOptions& options() const override { return ref_.options(); }
  const serve::EngineIdentity& identity() const override { return ref_.identity(); }
  std::vector<std::string> adapter_ids() const override { return ref_.adapter_ids(); }
  bool adapter_registered(const std::string& id) const override {
    return ref_.adapter_registered(id);
  }

 private:
  // In this order: the engine (its thread) stops before the model goes.
  Model model_;
  Engine engine_;
  serve::EngineRefOf<Engine> ref_;
};

}  // namespace servekit::cli
