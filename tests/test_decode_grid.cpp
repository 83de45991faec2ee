// SPDX-License-Identifier: Apache-2.0
// A GPT-2 small decode step at batch 1 as the Cuda backend launches it, listed by the emulator
// without running a block (simt::DryRun) on random weights. One row of decode reads every
// weight once, so it is as fast as the GPU's memory, and that needs blocks on every SM: each
// linear, lm_head included, must launch at least kFillBlocks = 264 blocks, two per SM of an
// H100 (132 SMs). The decode linears share K among blocks for it (split-K, common.hpp). At batch
// 8 the step's launches move at most 1.2x the bytes it must move (model/step_bytes.hpp), by the
// launchers' own bytes models: x and the split's parts are what a launch adds. So do its LoRA
// launches where each row has its own adapter.
#include <random>
#include <string>
#include <vector>

#include "servekit/backend/emulated_device.hpp"
#include "servekit/lora/random_adapter.hpp"
#include "servekit/model/dry_step.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/model/random_gpt2.hpp"
#include "servekit/model/step_bytes.hpp"
#include "servekit/simt/counters.hpp"

#include <catch2/catch.hpp>

namespace sk = servekit;
namespace w = servekit::weights;
using D = sk::dims::Gpt2Small;

namespace {
const sk::model::Gpt2Tensors& tensors() {
  static const auto t = sk::model::random_gpt2<D>(1);
  return t;
}
}  // namespace

TEMPLATE_TEST_CASE("a GPT-2 small decode step's linears fill an H100 at batch 1",
                   "[device][budget]", w::F32, w::F16, w::BF16, w::U8ZeroPoint<w::PerChannel>) {
  using Model = sk::Gpt2<
      sk::Config<D, TestType, sk::kv::Paged<16>, sk::lora::None, sk::backend::EmulatedDevice>>;
  Model model(tensors());
  model.set_graphs(false);  // the eager step: its launches are what a graph would hold
  auto cache = model.make_cache(1, 64);
  const auto launched = sk::model::dry_decode_step(model, cache, 1, 4);
  int linears = 0;
  for (const auto& r : launched) {
    if (r.kernel.find("linear") == std::string::npos &&
        r.kernel.find("lm_head") == std::string::npos)
      continue;
    INFO(Model::name() << ": " << r.kernel << " launched " << r.grid.x << " x " << r.grid.y << " x "
                       << r.grid.z << " blocks");
    CHECK(r.blocks() >= static_cast<unsigned long long>(sk::kernels::kFillBlocks));
    linears++;
  }
  CHECK(linears == 4 * D::n_layer + 1);  // c_attn, c_proj, c_fc, mlp c_proj per layer; the head
}

// From 9 rows on the CUDA-core linears leave the GEMV for the tiled GEMM (64 x 64 tiles), whose
// grid without a split is ceil(N / 64) blocks, 12 to 48 here; the tensor-core kernel's is alike.
// Up to 64 rows (one CUDA-core row tile, two tensor-core ones) they split over K, so every
// linear keeps at least one block on each of an H100's SMs.
template <class Fmt>
void check_fills_sms(int B) {
  using Model =
      sk::Gpt2<sk::Config<D, Fmt, sk::kv::Paged<16>, sk::lora::None, sk::backend::EmulatedDevice>>;
  Model model(tensors());
  model.set_graphs(false);
  auto cache = model.make_cache(B, 64);
  int linears = 0;
  for (const auto& r : sk::model::dry_decode_step(model, cache, B, 4)) {
    if (r.kernel.find("linear") == std::string::npos &&
        r.kernel.find("lm_head") == std::string::npos)
      continue;
    INFO(Model::name() << " at batch " << B << ": " << r.kernel << " launched " << r.grid.x << " x "
                       << r.grid.y << " x " << r.grid.z << " blocks");
    CHECK(r.blocks() >= static_cast<unsigned long long>(sk::kernels::kFillBlocks / 2));
    linears++;
  }
  CHECK(linears == 4 * D::n_layer + 1);
}

TEMPLATE_TEST_CASE("a GPT-2 small decode step's linears keep a block on every SM to batch 64",
                   "[device][budget]", w::F32, w::F16, w::BF16, w::U8ZeroPoint<w::PerChannel>) {
  for (int B : {9, 16, 33, 64}) check_fills_sms<TestType>(B);
}

TEMPLATE_TEST_CASE("a GPT-2 small decode step at batch 8 moves at most 1.2x the bytes it must",
                   "[device][budget]", w::F32, w::F16, w::BF16, w::U8ZeroPoint<w::PerChannel>) {
  using Model = sk::Gpt2<
      sk::Config<D, TestType, sk::kv::Paged<16>, sk::lora::None, sk::backend::EmulatedDevice>>;
  constexpr int B = 8, context = 512;  // bench_decode_launches' default context
  Model model(tensors());
  model.set_graphs(false);
  auto cache = model.make_cache(B, context + 1);
  double moved = 0;
  for (const auto& r : sk::model::dry_decode_step(model, cache, B, context))
    moved += static_cast<double>(r.bytes);
  const double must = sk::model::decode_step_bytes<D>(model.weight_bytes(), B, context).must();
  INFO(Model::name() << ": moves " << moved / 1048576.0 << " MiB, must move " << must / 1048576.0
                     << " MiB");
  CHECK(moved <= 1.2 * must);
}

// A decode step whose rows each have their own adapter (ranks 4..16 on every linear) launches
// a shrink and an expand per linear and nothing else for LoRA (the kernels write the delta
// buffer: no zeroing launch), and those launches move at most 1.2x the bytes the adapters'
// work must move (model/step_bytes.hpp: each adapter once, as the model stores it, each row's
// x and delta once), by the launchers' own model (kernels::lora_bytes; the segmented policy of
// this f16 composition: its tensor-core kernels on 16-bit adapters, lora_mma_bytes).
TEMPLATE_TEST_CASE("a decode step's LoRA launches move at most 1.2x what they must",
                   "[device][budget][lora]", sk::lora::Gathered, sk::lora::Segmented) {
  using Model =
      sk::Gpt2<sk::Config<D, w::F16, sk::kv::Paged<16>, TestType, sk::backend::EmulatedDevice>>;
  Model model(tensors());
  model.set_graphs(false);
  constexpr int B = 8;
  std::mt19937_64 rng(3);
  std::vector<sk::lora::Adapter> adapters;
  std::vector<int32_t> slots;
  for (int i = 0; i < B; i++) {
    adapters.push_back(sk::lora::random_adapter<D>(
        {.name = "a" + std::to_string(i), .rank = 4 + static_cast<int>(rng() % 13)}, rng));
    slots.push_back(model.add_adapter(adapters.back()));
  }
  auto cache = model.make_cache(B, 64);
  double moved = 0;
  int shrinks = 0, expands = 0;
  for (const auto& r : sk::model::dry_decode_step(model, cache, B, 4, slots)) {
    INFO(r.kernel);
    CHECK(r.kernel.find("zero_kernel") == std::string::npos);
    if (r.kernel.find("lora_") == std::string::npos) continue;
    CHECK(r.bytes > 0);  // modelled
    moved += static_cast<double>(r.bytes);
    (r.kernel.find("shrink") != std::string::npos ? shrinks : expands)++;
  }
  CHECK(shrinks == 4 * D::n_layer);
  CHECK(expands == 4 * D::n_layer);
  constexpr bool k16 = !std::is_same_v<typename Model::LoraFormat, w::F32>;
  STATIC_REQUIRE(k16 == std::is_same_v<TestType, sk::lora::Segmented>);
  const double must = sk::model::lora_step_bytes<D>(adapters, slots, k16 ? 2 : 4);
  INFO("LoRA launches move " << moved / 1048576.0 << " MiB, must " << must / 1048576.0);
  CHECK(moved <= 1.2 * must);
  CHECK(moved >= must);
}
