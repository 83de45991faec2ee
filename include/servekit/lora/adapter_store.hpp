// SPDX-License-Identifier: Apache-2.0
#pragma once
// AdapterStore: where adapters live when no step is using them, as LoRAX and S-LoRA keep them.
//
//   disk   an adapter is an id: a name registered with add(id, folder), or (allow_paths) a
//          folder path itself, as LoRAX's adapter_source "local"
//   host   loaded adapters kept in memory up to host_bytes, least recently used dropped first
//   device the model's adapter slots; the engine manages that tier (serve/adapter_slots.hpp)
//
// fetch() never blocks: a miss starts a load on the store's loader thread, and the listener
// hears when it is done (the adapter, or the error naming the file and field at fault), so the
// engine keeps stepping the requests it has while one waits for its adapter. Capacity is in
// bytes because ranks and target sets differ. An adapter the host tier drops stays alive while
// anything (a device slot, a waiting request) still holds it.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <filesystem>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/lora/adapter.hpp"
#include "servekit/core/dims.hpp"

namespace servekit::lora {

struct StoreOptions {
  std::size_t host_bytes = std::size_t{1} << 30;  // the host tier's capacity
  AdapterLimits limits;                           // max_rank
  bool allow_paths = true;  // an id naming a folder loads that folder (LoRAX "local")
};

struct StoreCounters {
  long host_hits = 0, host_misses = 0;  // fetches served from memory / that started a load
  long disk_loads = 0, load_failures = 0, host_evictions = 0;
  double disk_load_ms = 0;  // all loads together (mean: / disk_loads)
  std::size_t host_bytes = 0;
  int host_resident = 0;
};

// A load that ended: the adapter, or why it could not be read.
struct Loaded {
  std::string id;
  std::shared_ptr<const Adapter> adapter;
  std::string error;
  double ms = 0;
};

template <dims::ModelDims D>
class AdapterStore {
 public:
  using Listener = std::function<void(Loaded)>;

  explicit AdapterStore(StoreOptions o = {}) : opt_(o), thread_([this] { loader(); }) {}
  AdapterStore(const AdapterStore&) = delete;
  AdapterStore& operator=(const AdapterStore&) = delete;
  ~AdapterStore() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  const StoreOptions& options() const { return opt_; }

  // Names the adapter in `dir` `id`. Nothing is read until a request asks for it; a folder
  // that is not there is refused now. Registering an id again points it at the new folder and
  // drops the host copy of the old one.
  void add(std::string id, std::filesystem::path dir) {
    if (id.empty()) fail("adapter store: an adapter id must not be empty");
    if (!std::filesystem::is_directory(dir))
      fail("adapter store: adapter '", id, "': ", dir.string(), " is not a folder");
    std::lock_guard lk(mu_);
    names_[id] = std::move(dir);
    drop(id);
  }

  // The folder `id` stands for, or nothing.
  std::optional<std::filesystem::path> locate(std::string_view id) const {
    std::lock_guard lk(mu_);
    return locate_locked(std::string(id));
  }

  // The adapter if the host tier holds it; otherwise a load starts (unless one is under way)
  // and the listener hears of it. Throws for an id that names nothing.
  std::shared_ptr<const Adapter> fetch(const std::string& id) {
    std::unique_lock lk(mu_);
    if (auto a = hit(id)) return a;
    if (!locate_locked(id)) fail(unknown(id));
    if (loading_.insert(id).second) {
      c_.host_misses++;
      queue_.push_back(id);
      lk.unlock();
      cv_.notify_all();
    }
    return nullptr;
  }

  // Blocking: the adapter, read on the caller's thread if it is not in memory. Throws the
  // load's error.
  std::shared_ptr<const Adapter> get(const std::string& id) {
    std::optional<std::filesystem::path> dir;
    {
      std::lock_guard lk(mu_);
      if (auto a = hit(id)) return a;
      dir = locate_locked(id);
      if (!dir) fail(unknown(id));
      c_.host_misses++;
    }
    Loaded r = load(id, *dir);
    if (!r.error.empty()) fail(r.error);
    return r.adapter;
  }

  // Called on the loader thread after each load; set it before the first fetch.
  void listen(Listener l) {
    std::lock_guard lk(mu_);
    listener_ = std::move(l);
  }

  // Whether `id` is a name given to add() (not a folder path).
  bool registered(std::string_view id) const {
    std::lock_guard lk(mu_);
    return names_.contains(std::string(id));
  }

  // The registered names and the ids held in memory, sorted.
  std::vector<std::string> ids() const {
    std::lock_guard lk(mu_);
    std::vector<std::string> v;
    for (const auto& [id, dir] : names_) v.push_back(id);
    for (const auto& [id, e] : host_)
      if (!names_.contains(id)) v.push_back(id);
    std::sort(v.begin(), v.end());
    return v;
  }

  bool in_memory(const std::string& id) const {
    std::lock_guard lk(mu_);
    return host_.contains(id);
  }

  StoreCounters counters() const {
    std::lock_guard lk(mu_);
    StoreCounters c = c_;
    c.host_bytes = bytes_;
    c.host_resident = static_cast<int>(host_.size());
    return c;
  }

 private:
  struct Entry {
    std::shared_ptr<const Adapter> adapter;
    std::size_t bytes;
    std::list<std::string>::iterator lru;
  };

  std::optional<std::filesystem::path> locate_locked(const std::string& id) const {
    if (auto it = names_.find(id); it != names_.end()) return it->second;
    if (opt_.allow_paths && std::filesystem::is_directory(id)) return std::filesystem::path(id);
    return std::nullopt;
  }
  static std::string unknown(const std::string& id) {
    return servekit::detail::cat(
        "adapter '", id,
        "' is neither registered (AdapterStore::add) nor a folder with an adapter");
  }
  std::shared_ptr<const Adapter> hit(const std::string& id) {
    auto it = host_.find(id);
    if (it == host_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    c_.host_hits++;
    return it->second.adapter;
  }
  void drop(const std::string& id) {
    auto it = host_.find(id);
    if (it == host_.end()) return;
    bytes_ -= it->second.bytes;
    lru_.erase(it->second.lru);
    host_.erase(it);
  }

  // Reads the folder (no lock held), then keeps the adapter in the host tier if it fits,
  // dropping the least recently used ones to make room.
  Loaded load(const std::string& id, const std::filesystem::path& dir) {
    Loaded r{id, nullptr, {}, 0};
    const auto t0 = std::chrono::steady_clock::now();
    try {
      Adapter a = load_adapter<D>(dir, opt_.limits);
      a.name = id;
      r.adapter = std::make_shared<const Adapter>(std::move(a));
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard lk(mu_);
    if (!r.adapter) {
      c_.load_failures++;
      return r;
    }
    c_.disk_loads++;
    c_.disk_load_ms += r.ms;
    const std::size_t n = r.adapter->bytes();
    // Used, never kept: larger than the tier, or the id was pointed at another folder
    // (add()) while this one was being read.
    if (n > opt_.host_bytes || locate_locked(id) != dir) return r;
    drop(id);
    while (bytes_ + n > opt_.host_bytes && !lru_.empty()) {
      drop(lru_.back());
      c_.host_evictions++;
    }
    lru_.push_front(id);
    host_.emplace(id, Entry{r.adapter, n, lru_.begin()});
    bytes_ += n;
    return r;
  }

  void loader() {
    while (true) {
      std::string id;
      std::filesystem::path dir;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        id = std::move(queue_.front());
        queue_.pop_front();
        auto d = locate_locked(id);
        dir = d ? *d : std::filesystem::path(id);
      }
      Loaded r = load(id, dir);
      Listener l;
      {
        std::lock_guard lk(mu_);
        l = listener_;
        // No longer loading before anyone hears of it: a fetch after the report must start a
        // new load, or it would wait for a report that never comes. A fetch between this and
        // the report starts a second load; the engine avoids that by not fetching an id whose
        // report it awaits.
        loading_.erase(id);
      }
      if (l) l(std::move(r));
    }
  }

  StoreOptions opt_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::string, std::filesystem::path> names_;
  std::unordered_map<std::string, Entry> host_;
  std::list<std::string> lru_;  // most recently used first
  std::size_t bytes_ = 0;
  std::deque<std::string> queue_;
  std::unordered_set<std::string> loading_;
  Listener listener_;
  StoreCounters c_;
  bool stop_ = false;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace servekit::lora
