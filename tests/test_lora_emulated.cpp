// SPDX-License-Identifier: Apache-2.0
// A merged PEFT adapter on the Emulated backend (the CUDA kernels under the emulator) gives
// HF + PEFT's logits and greedy tokens, as on the host (test_lora.cpp).
#include <catch2/catch.hpp>

#include "servekit/backend/emulated.hpp"
#include "servekit/lora/adapter.hpp"
#include "servekit/model/merge_lora.hpp"
#include "servekit/model/gpt2.hpp"
#include "support/hf_checks.hpp"

namespace sk = servekit;

TEMPLATE_TEST_CASE("emulated: a merged adapter gives PEFT's logits and greedy tokens",
                   "[lora][emulated][hf]", sk::dims::TinyA, sk::dims::TinyB) {
  using D = TestType;
  using Cfg =
      sk::Config<D, sk::weights::F32, sk::kv::Paged<16>, sk::lora::None, sk::backend::Emulated>;
  const auto dir = sk::test::fixture_dir<D>() / "lora" / "r16";
  auto t = sk::model::load_gpt2<D>(sk::test::fixture_dir<D>());
  sk::lora::merge(t, sk::lora::load_adapter<D>(dir));
  sk::Gpt2<Cfg> model(std::move(t));
  const auto ref = sk::test::load_reference(dir);
  for (const auto& c : ref.cases) {
    INFO("case " << c.name);
    auto cache = model.make_cache(1);
    sk::test::check_hf_case(model, cache, 0, c, ref.n_steps, 1e-4f);
  }
}
