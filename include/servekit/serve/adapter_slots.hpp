// SPDX-License-Identifier: Apache-2.0
#pragma once
// AdapterSlots: the device tier of the adapter store, i.e. the model's adapter slots, managed
// by the engine thread. Each slot's adapter counts the requests that hold it (waiting or
// running); only an adapter nobody holds may be evicted, least recently used first, when a
// new one needs room. Capacity is in bytes. Adapters that were in the model before the engine
// was made are pinned: always there, never evicted, not counted against the capacity. An
// adapter counts the bytes the model stores it in (Gpt2::adapter_bytes: 16-bit on a 16-bit
// composition's device step, fp32 elsewhere).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/lora/adapter.hpp"

namespace servekit::serve {

struct SlotCounters {
  long hits = 0, misses = 0;  // acquires that found the adapter on the device / did not
  long uploads = 0, evictions = 0;
  double upload_ms = 0;  // host -> device, all uploads together
  std::size_t bytes = 0;
  int resident = 0;  // managed adapters on the device now (pinned ones not counted)
};

template <class Model>
class AdapterSlots {
 public:
  AdapterSlots(Model& m, std::size_t capacity_bytes) : model_(m), capacity_(capacity_bytes) {
    for (int s = 0; s < m.adapter_slots(); s++)
      if (const lora::Adapter* a = m.adapter(s)) pinned_.insert(a->name);
  }

  // Adapters the model held before the engine: the set never changes, so any thread may ask.
  bool pinned(const std::string& id) const { return pinned_.contains(id); }

  // The slot holding id with one more holder, or -1 if it is not on the device.
  int acquire(const std::string& id) {
    if (pinned(id)) {
      c_.hits++;
      return model_.find_adapter(id);
    }
    auto it = by_id_.find(id);
    if (it == by_id_.end()) {
      c_.misses++;
      return -1;
    }
    c_.hits++;
    Entry& e = slots_.at(it->second);
    e.holders++;
    e.used = ++tick_;
    return it->second;
  }

  // Puts `a` on the device with one holder, evicting least recently used adapters that nobody
  // holds to make room. -1: the adapters in use leave no room now (try again when one is let
  // go). Throws if `a` can never fit or the model refuses it.
  int place(std::shared_ptr<const lora::Adapter> a) {
    const std::size_t n = Model::adapter_bytes(*a);  // in the model's storage of adapters
    if (n > capacity_)
      fail("adapter '", a->name, "' needs ", n, " bytes, more than the device tier's ", capacity_,
           " (EngineOptions::adapter_device_bytes)");
    while (bytes_ + n > capacity_) {
      int victim = -1;
      for (const auto& [slot, e] : slots_)
        if (e.holders == 0 && (victim < 0 || e.used < slots_.at(victim).used)) victim = slot;
      if (victim < 0) return -1;
      evict(victim);
    }
    const auto t0 = std::chrono::steady_clock::now();
    const std::string id = a->name;
    const int slot = model_.add_adapter(std::move(a));
    c_.upload_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    c_.uploads++;
    slots_[slot] = {id, n, 1, ++tick_};
    by_id_[id] = slot;
    bytes_ += n;
    return slot;
  }

  // One holder of `slot` lets go (pinned slots have none to count).
  void release(int slot) {
    auto it = slots_.find(slot);
    if (it != slots_.end() && it->second.holders > 0) it->second.holders--;
  }

  // Takes every adapter this tier put on the device out of the model (the engine is ending).
  void clear() {
    for (const auto& [slot, e] : slots_) model_.remove_adapter(slot);
    slots_.clear(), by_id_.clear();
    bytes_ = 0;
  }

  SlotCounters counters() const {
    SlotCounters c = c_;
    c.bytes = bytes_;
    c.resident = static_cast<int>(slots_.size());
    return c;
  }

 private:
  struct Entry {
    std::string id;
    std::size_t bytes = 0;
    int holders = 0;
    uint64_t used = 0;  // tick of the last acquire
  };

  void evict(int slot) {
    Entry& e = slots_.at(slot);
    model_.remove_adapter(slot);
    bytes_ -= e.bytes;
    by_id_.erase(e.id);
    slots_.erase(slot);
    c_.evictions++;
  }

  Model& model_;
  std::size_t capacity_;
  std::unordered_set<std::string> pinned_;
  std::unordered_map<int, Entry> slots_;
  std::unordered_map<std::string, int> by_id_;
  std::size_t bytes_ = 0;
  uint64_t tick_ = 0;
  SlotCounters c_;
};

}  // namespace servekit::serve
