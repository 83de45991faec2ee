// SPDX-License-Identifier: Apache-2.0
#pragma once
// --speculative draft:DIR: the draft model (serve/draft_model.hpp) read from a Hugging Face
// folder (config.json + model.safetensors), its shape dispatched like the target's
// (model/dispatch.hpp). It runs f32 weights on the host with a contiguous cache, whatever the
// target's composition: one composition per shape, compiled once in the CLI's main unit rather
// than beside each of the target's.
#include <filesystem>
#include <memory>
#include <string>
#include <type_traits>

#include "servekit/core/error.hpp"
#include "servekit/model/config.hpp"
#include "servekit/model/dispatch.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/model/hf_config.hpp"
#include "servekit/serve/draft_model.hpp"

namespace servekit::cli {

// The draft at dir with a cache slot for each of `slots` sequences; errors name the flag.
inline std::shared_ptr<serve::Drafter> load_draft(const std::string& dir, int slots) {
  try {
    const auto cfg = model::read_gpt2_config(std::filesystem::path(dir) / "config.json");
    return dispatch_dims(cfg, [&]<class D>(std::type_identity<D>) {
      using M = Gpt2<Config<D>>;
      auto m = std::make_shared<M>(M::load(dir));
      return std::shared_ptr<serve::Drafter>(
          std::make_shared<serve::DraftModel<M>>(std::move(m), slots));
    });
  } catch (const Error& e) {
    fail("--speculative draft ", dir, ": ", e.what());
  }
}

}  // namespace servekit::cli
