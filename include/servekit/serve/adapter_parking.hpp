// SPDX-License-Identifier: Apache-2.0
#pragma once
// AdapterParking<Model>: where a LoRA request waits until its adapter is on the device, as
// LoRAX splits its scheduler from its loader. The adapter's two tiers (the store's loaded
// adapters in host memory, lora/adapter_store.hpp; the model's slots, serve/adapter_slots.hpp)
// and the requests parked on them live here; the engine thread calls it between steps and gets
// back which requests may now be scheduled and which failed. It never touches the scheduler's
// queues itself.
#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "servekit/lora/adapter_store.hpp"
#include "servekit/serve/adapter_slots.hpp"
#include "servekit/serve/engine_stats.hpp"
#include "servekit/serve/sched/core.hpp"

namespace servekit::serve {

// What a pass over the parked requests decided.
struct Placement {
  std::vector<Seq*> placed;                          // have their slot: may be scheduled
  std::vector<std::pair<Seq*, std::string>> failed;  // end with this error
};

template <class Model>
class AdapterParking {
 public:
  using Store = lora::AdapterStore<typename Model::Dims>;

  AdapterParking(Model& m, const EngineOptions& o)
      : slots(m, o.adapter_device_bytes),
        store({o.adapter_host_bytes, {o.adapter_max_rank}, o.adapter_paths}) {}

  AdapterSlots<Model> slots;
  Store store;

  void park(Seq* s) { parked_.push_back(s); }
  bool empty() const { return parked_.empty(); }
  std::size_t size() const { return parked_.size(); }
  const std::vector<Seq*>& parked() const { return parked_; }

  // The tiers' counters, and the adapters of the running, waiting and parked requests (each
  // named once, in the order first seen).
  template <class Running, class Waiting>
  void add_stats(EngineStats& s, const Running& running, const Waiting& waiting) const {
    s.adapters.host = store.counters();
    s.adapters.device = slots.counters();
    s.adapters.parked = static_cast<long>(parked_.size());
    auto names = [](const auto& seqs, std::vector<std::string>& out) {
      for (const auto& q : seqs)
        if (const auto& id = q->st->request().adapter;
            id && std::find(out.begin(), out.end(), *id) == out.end())
          out.push_back(*id);
    };
    names(running, s.running_adapters);
    names(waiting, s.waiting_adapters);
    names(parked_, s.waiting_adapters);
  }

  // s leaves the engine: out of the parking, and its adapter slot given back. True when that
  // may make room for a parked request.
  bool release(Seq* s) {
    std::erase(parked_, s);
    if (s->adapter < 0) return false;
    slots.release(s->adapter);
    s->adapter = -1;
    return !parked_.empty();
  }

  // A load ended: the requests parked on it fail with its error (returned), or may now be
  // placed.
  std::vector<Seq*> on_loaded(const lora::Loaded& l) {
    awaited_.erase(l.id);
    std::vector<Seq*> failed;
    for (Seq* p : parked_)
      if (*p->st->request().adapter == l.id) {
        if (l.adapter)
          ready_[l.id] = l.adapter;
        else
          failed.push_back(p);
      }
    return failed;
  }

  // Gives each parked request its adapter's device slot where it can: already there (a hit),
  // loaded and room to place it (evicting adapters nobody holds), or else a load is started or
  // it waits for room. Placed requests leave the parking in arrival order.
  Placement place() {
    Placement out;
    for (auto it = parked_.begin(); it != parked_.end();) {
      Seq* p = *it;
      const std::string& id = *p->st->request().adapter;
      int slot = slots.acquire(id);
      if (slot < 0) {
        std::shared_ptr<const lora::Adapter> a;
        try {
          if (auto r = ready_.find(id); r != ready_.end())
            a = r->second;
          else if (!awaited_.contains(id) && !(a = store.fetch(id)))
            awaited_.insert(id);  // loading; the listener will say when
          if (a) slot = slots.place(a);
        } catch (const std::exception& e) {
          out.failed.emplace_back(p, e.what());
          ++it;
          continue;
        }
        if (slot < 0) {
          if (a) ready_[id] = a;  // held until there is room
          ++it;
          continue;
        }
      }
      p->adapter = slot;
      out.placed.push_back(p);
      it = parked_.erase(it);
    }
    // Loaded adapters that no parked request wants any more are not held here.
    for (auto r = ready_.begin(); r != ready_.end();) {
      const bool wanted = std::any_of(parked_.begin(), parked_.end(), [&](Seq* p) {
        return *p->st->request().adapter == r->first;
      });
      r = wanted ? std::next(r) : ready_.erase(r);
    }
    return out;
  }

 private:
  std::vector<Seq*> parked_;  // arrival order
  std::unordered_map<std::string, std::shared_ptr<const lora::Adapter>> ready_;
  // Ids whose load this engine started and has not heard the end of. The store stops counting
  // a load as under way when it reports it, before this thread reads the report: asking the
  // store again in between would start a second load of the same folder.
  std::unordered_set<std::string> awaited_;
};

}  // namespace servekit::serve
