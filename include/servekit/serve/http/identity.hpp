// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the server is, as /info, /v1/models and /metrics report it: the composition it runs
// (weights / kv / lora / scheduler / backend, as serve/composition.hpp names them), the device,
// the weights' dtype, the KV cache's layout and block size, and the LoRA limits.
#include <nlohmann/json.hpp>
#include <string>

#include "servekit/serve/engine_ref.hpp"

namespace servekit::serve::http {

// TGI's spelling of a weight format's dtype; u8 formats name their granularity.
inline std::string dtype_name(const std::string& weights) {
  if (weights == "f32") return "float32";
  if (weights == "f16") return "float16";
  if (weights == "bf16") return "bfloat16";
  return "uint8 (" + weights + ")";
}

inline nlohmann::json identity_json(const EngineRef& engine, const std::string& device) {
  const EngineIdentity& id = engine.identity();
  const EngineOptions& eo = engine.options();
  return {{"composition", id.composition},
          {"dims", id.dims},
          {"backend", id.backend},
          {"device", device},
          {"weights", id.weights},
          {"dtype", dtype_name(id.weights)},
          {"kv_cache", {{"layout", id.kv}, {"dtype", id.kv_elem}, {"block_size", id.block_size}}},
          {"lora",
           {{"dispatch", id.lora},
            // distinct adapters at once: --max-loras, else every row of a batch its own
            {"max_loras", !id.lora_enabled             ? 0
                          : eo.max_active_adapters > 0 ? eo.max_active_adapters
                                                       : eo.max_batch},
            {"max_lora_rank", id.lora_enabled ? eo.adapter_max_rank : 0}}},
          {"scheduler", id.scheduler}};
}

}  // namespace servekit::serve::http
