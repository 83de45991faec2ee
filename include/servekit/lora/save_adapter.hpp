// SPDX-License-Identifier: Apache-2.0
#pragma once
// Writes an adapter as PEFT's save_pretrained does (adapter_config.json and
// adapter_model.safetensors with PEFT's key names), so that load_adapter, PEFT and any LoRAX
// style server read it back. Used to lay out many adapters on disk for the adapter store's
// tests and benchmarks.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "servekit/core/error.hpp"
#include "servekit/io/safetensors_writer.hpp"
#include "servekit/lora/adapter.hpp"

namespace servekit::lora {

inline void save_adapter(const Adapter& a, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  nlohmann::ordered_json cfg;
  cfg["peft_type"] = "LORA";
  cfg["r"] = a.rank;
  cfg["lora_alpha"] = a.alpha;
  cfg["use_rslora"] = a.rslora;
  cfg["bias"] = "none";
  cfg["fan_in_fan_out"] = true;
  cfg["target_modules"] = nlohmann::ordered_json::array();
  for (int t = 0; t < kTargets; t++) {
    bool used = a.targets[t];
    for (const auto& l : a.layers) used = used || l[t].has_value();
    if (used) cfg["target_modules"].push_back(kTargetNames[t]);
  }
  const auto cfg_path = dir / "adapter_config.json";
  std::ofstream f(cfg_path);
  if (!(f << cfg.dump(2) << "\n")) fail(cfg_path.string(), ": cannot write");

  std::vector<io::F32Tensor> ts;
  for (std::size_t l = 0; l < a.layers.size(); l++)
    for (int t = 0; t < kTargets; t++)
      if (const auto& p = a.layers[l][t]) {
        const std::string key = "base_model.model.transformer.h." + std::to_string(l) + "." +
                                std::string(kTargetNames[t]) + ".lora_";
        ts.push_back({key + "A.weight", {p->rank, p->in}, p->a});
        ts.push_back({key + "B.weight", {p->out, p->rank}, p->b});
      }
  io::write_safetensors(dir / "adapter_model.safetensors", ts);
}

}  // namespace servekit::lora
