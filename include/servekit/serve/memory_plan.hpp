// SPDX-License-Identifier: Apache-2.0
#pragma once
// An engine's memory, sized before any of it is taken: the KV cache, the step buffers and the
// LoRA adapter tiers, against the memory the engine may use (EngineOptions::memory_limit, else
// a share of what its storage has available when it starts: host memory, or the device's on
// Cuda). The weights are the model's, loaded before, so they are already out of what is
// available. Asking for more than fits is an error naming each part's size and the option
// that sets it; a paged pool left at kv_blocks = 0 takes as many blocks as fit, up to max_batch
// full-length sequences, as vLLM sizes its pool from --gpu-memory-utilization.
#include <algorithm>
#include <cstddef>
#include <new>
#include <string>
#include <type_traits>

#include "servekit/core/error.hpp"
#include "servekit/core/memory_info.hpp"
#include "servekit/serve/sched/core.hpp"

namespace servekit::serve {

// The share of the available memory an engine takes when memory_limit is 0 (vLLM's
// --gpu-memory-utilization default).
inline constexpr double kDefaultMemoryShare = 0.9;

struct MemoryPlan {
  double limit = 0;                            // bytes the engine may allocate
  std::string limit_source;                    // where the limit came from, for messages
  double kv = 0, workspace = 0, adapters = 0;  // bytes of each part
  double kv_token = 0;  // bytes of one cached token: 2 x L x C x element (+ an int8 cache's scales)
  long kv_tokens = 0;   // rows the KV cache holds
  int kv_blocks = 0;    // paged: blocks in the pool (0: contiguous)

  double total() const { return kv + workspace + adapters; }
  // "KV cache 1.1 GiB (16384 tokens), step buffers 52.0 MiB: 1.2 GiB of 19.9 GiB (...)"
  std::string describe() const {
    std::string s = "KV cache " + bytes_text(kv) + " (" + std::to_string(kv_tokens) + " tokens";
    if (kv_blocks > 0) s += " in " + std::to_string(kv_blocks) + " blocks";
    s += "), step buffers " + bytes_text(workspace);
    if (adapters > 0) s += ", adapter tiers " + bytes_text(adapters);
    return s + ": " + bytes_text(total()) + " of " + bytes_text(limit) + " (" + limit_source + ")";
  }
};

// Sizes the engine of Model (whose cache is Cache) for options o, or throws. B: tokens per
// block of a paged cache (0: contiguous); P: a sequence's most rows.
template <class Model, class Cache>
MemoryPlan plan_memory(const EngineOptions& o) {
  constexpr int P = Model::P, L = Model::L, C = Model::C;
  MemoryPlan m;
  if (o.memory_limit > 0) {
    m.limit = static_cast<double>(o.memory_limit);
    m.limit_source = "memory_limit, --memory-limit";
  } else {
    const double avail = static_cast<double>(Model::Storage::available_bytes());
    m.limit = kDefaultMemoryShare * avail;
    m.limit_source = std::to_string(static_cast<int>(100 * kDefaultMemoryShare)) + "% of the " +
                     bytes_text(avail) + " available" +
                     (Model::Storage::is_host ? "" : " on the device") +
                     "; memory_limit, --memory-limit";
  }
  m.kv_token = static_cast<double>(Cache::token_bytes(L, C, Model::H));
  const int rows = max_logit_rows(o);
  m.workspace =
      static_cast<double>(Model::reserve_bytes(o.max_batched_tokens, rows, P)) +
      static_cast<double>(rows) * Model::V * sizeof(float);  // the engine's own copy of the logits
  if constexpr (Model::kLora)
    m.adapters = static_cast<double>(o.adapter_host_bytes) + o.adapter_device_bytes;
  const double room = m.limit - m.workspace - m.adapters;  // what the KV cache may take
  const std::string over =
      " over the memory limit of " + bytes_text(m.limit) + " (" + m.limit_source + "): ";
  const std::string others =
      "step buffers " + bytes_text(m.workspace) + " (max_batched_tokens " +
      std::to_string(o.max_batched_tokens) + ", --max-batched-tokens)" +
      (m.adapters > 0 ? ", adapter tiers " + bytes_text(m.adapters) +
                            " (adapter_host_bytes + adapter_device_bytes, --adapter-host-memory + "
                            "--adapter-device-memory)"
                      : std::string());
  if constexpr (Core<Cache>::paged) {
    constexpr int B = Cache::B;
    const double block = m.kv_token * B;
    const long per_seq = (P + B - 1) / B;
    const long full = static_cast<long>(o.max_batch) * per_seq;
    const long fit = room > 0 ? static_cast<long>(room / block) : 0;
    if (o.kv_blocks > 0) {
      m.kv_blocks = o.kv_blocks;
      if (o.kv_blocks > fit)
        fail("engine: a KV cache of ", o.kv_blocks, " blocks (kv_blocks, --kv-blocks) of ", B,
             " tokens x ", bytes_text(m.kv_token), " needs ", bytes_text(o.kv_blocks * block),
             "; with the ", others, " that is ",
             bytes_text(o.kv_blocks * block + m.workspace + m.adapters), over,
             "lower --kv-blocks to at most ", std::max(0L, fit),
             ", or keep the cache in a smaller element type (--kv paged-f16)");
    } else {
      if (fit < per_seq)
        fail("engine: not even one ", P, "-token sequence's KV cache (", per_seq, " blocks of ", B,
             " tokens x ", bytes_text(m.kv_token), " = ", bytes_text(per_seq * block),
             ") fits beside the ", others, over, "raise --memory-limit, lower ",
             "--max-batched-tokens, or keep the cache in a smaller element type (--kv paged-f16)");
      m.kv_blocks = static_cast<int>(std::min(full, fit));
    }
    m.kv = m.kv_blocks * block;
    m.kv_tokens = static_cast<long>(m.kv_blocks) * B;
  } else {
    m.kv_tokens = static_cast<long>(o.max_batch) * P;
    m.kv = m.kv_tokens * m.kv_token;
    if (m.kv > room) {
      const long fit = room > 0 ? static_cast<long>(room / (P * m.kv_token)) : 0;
      fail("engine: a contiguous KV cache for ", o.max_batch, " sequences (max_batch, ",
           "--max-batch) of ", P, " tokens x ", bytes_text(m.kv_token), " needs ", bytes_text(m.kv),
           "; with the ", others, " that is ", bytes_text(m.total()), over,
           "lower --max-batch to at most ", std::max(0L, fit),
           ", keep the cache in a smaller element type (--kv contiguous-f16), or use a paged "
           "cache (--kv paged), which sizes its pool to the limit");
    }
  }
  return m;
}

// f(), naming what it was allocating when it fails.
template <class F>
auto allocating(const char* what, double bytes, F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    fail("engine: allocating ", what, " (", bytes_text(bytes), ") failed: out of memory; ",
         "lower --max-batch, --kv-blocks or --memory-limit");
  }
}

// The engine's KV cache, as plan sized it.
template <class Model>
typename Model::Cache make_engine_cache(const Model& m, const EngineOptions& o,
                                        const MemoryPlan& plan) {
  return allocating("the KV cache", plan.kv, [&] {
    if constexpr (Core<typename Model::Cache>::paged)
      return m.make_cache(o.max_batch, Model::P, plan.kv_blocks);
    else
      return m.make_cache(o.max_batch, Model::P);
  });
}

}  // namespace servekit::serve
