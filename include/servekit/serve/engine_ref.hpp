// SPDX-License-Identifier: Apache-2.0
#pragma once
// An engine seen through a narrow run-time interface: what a front end (the HTTP server) asks
// of it. The engine stays a template of its composition; the server is compiled once for every
// composition instead of once per composition, and a program that picks its composition at run
// time (the CLI) hands the server whichever engine it built.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "servekit/kv/policy.hpp"
#include "servekit/serve/engine.hpp"
#include "servekit/serve/engine_stats.hpp"
#include "servekit/serve/request.hpp"

namespace servekit::serve {

// What an engine is, in words: its composition (weights/kv/lora/scheduler/backend, as
// serve/composition.hpp names it) and each part of it.
struct EngineIdentity {
  std::string engine;       // Engine::name(): scheduler/dims/weights/kv/lora/backend
  std::string composition;  // weights/kv/lora/scheduler/backend
  std::string dims, weights, kv, kv_elem, lora, scheduler, backend;
  int block_size = 0;     // paged caches' tokens per block; 0: contiguous
  int max_positions = 0;  // the model's n_positions
  bool lora_enabled = false;
};

class EngineRef {
 public:
  virtual ~EngineRef() = default;
  virtual RequestHandle submit(Request r) = 0;
  virtual bool cancel(uint64_t id) = 0;
  virtual EngineStats stats() const = 0;
  virtual const EngineOptions& options() const = 0;
  virtual const EngineIdentity& identity() const = 0;
  // LoRA (empty / false without): the registered adapter names; whether id is one of them.
  virtual std::vector<std::string> adapter_ids() const = 0;
  virtual bool adapter_registered(const std::string& id) const = 0;
};

template <class E>
EngineIdentity identity_of() {
  using Cfg = typename E::Model::Config;
  using Kv = typename Cfg::Kv;
  EngineIdentity id;
  id.engine = E::name();
  id.dims = Cfg::Dims::name, id.weights = Cfg::Weights::name, id.kv = Kv::name;
  id.kv_elem = Kv::Elem::name, id.lora = Cfg::Lora::name, id.scheduler = E::Scheduler::name;
  id.backend = Cfg::Backend::name;
  id.composition = id.weights + "/" + id.kv + "/" + id.lora + "/" + id.scheduler + "/" + id.backend;
  if constexpr (kv::is_paged<Kv>) id.block_size = Kv::block_tokens;
  id.max_positions = E::P;
  id.lora_enabled = E::kLora;
  return id;
}

// E seen as an EngineRef; E must outlive it.
template <class E>
class EngineRefOf final : public EngineRef {
 public:
  explicit EngineRefOf(E& e) : e_(e), id_(identity_of<E>()) {}
  RequestHandle submit(Request r) override { return e_.submit(std::move(r)); }
  bool cancel(uint64_t id) override { return e_.cancel(id); }
  EngineStats stats() const override { return e_.stats(); }
  const EngineOptions& options() const override { return e_.options(); }
  const EngineIdentity& identity() const override { return id_; }
  std::vector<std::string> adapter_ids() const override {
    if constexpr (E::kLora) return e_.adapters().ids();
    return {};
  }
  bool adapter_registered(const std::string& id) const override {
    if constexpr (E::kLora) return e_.adapters().registered(id);
    return false;
  }

 private:
  E& e_;
  EngineIdentity id_;
};

}  // namespace servekit::serve
