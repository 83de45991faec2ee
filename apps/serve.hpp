// SPDX-License-Identifier: Apache-2.0
#pragma once
// `servekit serve`, the composition's part: its model and engine, with the adapters registered,
// handed to main() as a serve::EngineRef; main() runs the HTTP server on it (serve_main.hpp),
// which is compiled once for every composition.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli_common.hpp"
#include "device_name.hpp"
#include "job.hpp"
#include "owned_engine.hpp"
#include "servekit/lora/adapter.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/model/load_gpt2.hpp"
#include "servekit/model/merge_lora.hpp"
#include "servekit/model/random_gpt2.hpp"
#include "servekit/serve/engine.hpp"
#include "servekit/text/tokenizer.hpp"

namespace servekit::cli {

// --adapter values: ID=DIR, a folder with adapter_config.json (its name is the id), or a
// folder of such folders at any depth (each named by its path below it: predibase/cnn).
inline std::vector<std::pair<std::string, fs::path>> adapter_list(
    const std::vector<std::string>& args) {
  std::vector<std::pair<std::string, fs::path>> out;
  for (const auto& a : args) {
    if (auto eq = a.find('='); eq != std::string::npos) {
      out.emplace_back(a.substr(0, eq), a.substr(eq + 1));
      continue;
    }
    const fs::path dir(a);
    if (!fs::is_directory(dir)) fail("serve: --adapter ", a, ": not a folder");
    if (fs::exists(dir / "adapter_config.json")) {
      out.emplace_back(fs::absolute(dir).lexically_normal().filename().string(), dir);
      continue;
    }
    const std::size_t before = out.size();
    for (const auto& e : fs::recursive_directory_iterator(dir))
      if (e.is_directory() && fs::exists(e.path() / "adapter_config.json"))
        out.emplace_back(fs::relative(e.path(), dir).generic_string(), e.path());
    if (out.size() == before)
      fail("serve: --adapter ", a, ": no adapter_config.json in it or in any folder below it");
  }
  return out;
}

template <class C, class D>
int serve_as(const Job& job) {
  const ServeArgs& a = *job.serve;
  const text::Gpt2Tokenizer& tok = *job.tok;
  using Model = Gpt2<typename C::template Config<D>>;
  auto tensors = a.model.empty() ? model::random_gpt2<D>(a.seed) : model::load_gpt2<D>(a.model);
  const auto adapters = adapter_list(a.adapters);
  if (job.choice.merge) {
    if (adapters.size() != 1)
      fail("serve: --lora merge folds one adapter into the weights; ", adapters.size(),
           " adapters given (serve several with --lora gathered, loop or segmented)");
    lora::merge(tensors, lora::load_adapter<D>(adapters[0].second));
    std::fprintf(stderr, "servekit serve: adapter '%s' from %s merged into the weights\n",
                 adapters[0].first.c_str(), adapters[0].second.c_str());
  } else if (!lora::enabled<typename C::Lora> && !adapters.empty()) {
    fail("serve: --adapter needs a LoRA dispatch: --lora gathered, loop, segmented or merge");
  }
  serve::EngineOptions eo{.max_batch = a.max_batch,
                          .max_batched_tokens = a.max_batched_tokens,
                          .kv_blocks = a.kv_blocks,
                          .memory_limit = a.memory_limit};
  eo.adapter_paths = !a.no_adapter_paths;
  eo.prefix_caching = !a.no_prefix_caching;
  eo.jump_forward = !a.no_jump_forward;
  eo.priority_scheduling = a.scheduling_policy == "priority";
  eo.prefix_cache_blocks = a.prefix_cache_blocks;
  eo.speculative = a.speculative;
  eo.max_active_adapters = job.choice.max_loras;
  eo.adapter_max_rank = job.choice.max_lora_rank;
  if (a.adapter_host_bytes > 0) eo.adapter_host_bytes = a.adapter_host_bytes;
  if (a.adapter_device_bytes > 0) eo.adapter_device_bytes = a.adapter_device_bytes;
  auto owned =
      std::make_unique<OwnedEngine<Model, typename C::Scheduler>>(std::move(tensors), tok, eo);
  auto& engine = owned->engine();
  std::fprintf(stderr, "servekit serve: memory: %s\n", engine.memory().describe().c_str());
  if constexpr (lora::enabled<typename C::Lora>)
    if (!job.choice.merge)
      for (const auto& [id, dir] : adapters) {
        engine.adapters().add(id, dir);
        std::fprintf(stderr, "servekit serve: adapter '%s' from %s\n", id.c_str(), dir.c_str());
      }
  job.serve_out->engine = std::move(owned);
  job.serve_out->device = device_name<typename C::Backend>();
  return 0;
}

}  // namespace servekit::cli
