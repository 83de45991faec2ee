// SPDX-License-Identifier: Apache-2.0
// Any bytes as a LoRA adapter's adapter_config.json, beside a valid adapter_model.safetensors
// (tiny-a's rank-4 fixture): a servekit::Error, or an adapter whose ranks, scales and matrices
// fit the model.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>

#include "fuzz_file.hpp"
#include "servekit/lora/adapter.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using D = servekit::dims::TinyA;
  static const bool weights = [] {
    std::filesystem::copy_file(SERVEKIT_FIXTURES "/tiny-a/lora/r4/adapter_model.safetensors",
                               fuzz::scratch_dir() / "adapter_model.safetensors",
                               std::filesystem::copy_options::overwrite_existing);
    return true;
  }();
  (void)weights;
  fuzz::write_file("adapter_config.json", data, size);
  try {
    const auto a = servekit::lora::load_adapter<D>(fuzz::scratch_dir(), {.max_rank = 64});
    if (static_cast<int>(a.layers.size()) != D::n_layer) std::abort();
    if (a.rank < 1 || a.rank > 64 || !std::isfinite(a.scale)) std::abort();
    for (int l = 0; l < D::n_layer; l++)
      for (int t = 0; t < servekit::lora::kTargets; t++) {
        const auto target = static_cast<servekit::lora::Target>(t);
        const auto* m = a.find(l, target);
        if (!m) continue;
        const auto [in, out] = servekit::lora::target_shape(target, D::n_embd);
        if (m->rank < 1 || m->rank > 64 || m->in != in || m->out != out) std::abort();
        if (m->a.size() != std::size_t(m->rank) * in || m->b.size() != std::size_t(out) * m->rank)
          std::abort();
      }
  } catch (const servekit::Error&) {
  }
  return 0;
}
