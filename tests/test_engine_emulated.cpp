// SPDX-License-Identifier: Apache-2.0
// The engine's invariant with the CUDA kernels run by the emulator: continuous and static
// batching give each request its tokens alone, greedy and seeded, on both cache layouts, with
// preemption and chunked prefill forced on the paged one.
#include "engine_support.hpp"
#include "servekit/backend/emulated.hpp"

namespace sk = servekit;
namespace serve = servekit::serve;
namespace sched = servekit::serve::sched;
using namespace servekit::test::engine;

using D = sk::dims::Tiny<2, 4, 64, 512, 128>;
using Emu = sk::backend::Emulated;
using Contig = sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Contiguous, sk::lora::None, Emu>>;
using Paged = sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Paged<8>, sk::lora::None, Emu>>;

TEMPLATE_TEST_CASE("emulated: continuous and static batching == alone", "[engine][emulated]",
                   Contig, Paged) {
  auto m = TestType::random(5);
  for (bool sample : {false, true}) {
    INFO((sample ? "seeded sampling" : "greedy"));
    auto rs = make_requests(
        {.n = 10, .max_prompt = 60, .min_new = 20, .max_new = 40, .sample = sample}, D::vocab, 7);
    auto want = alone(m, rs);
    serve::EngineOptions opt{.max_batch = 4, .max_batched_tokens = 24};
    if constexpr (std::is_same_v<TestType, Paged>)
      opt.kv_blocks = 16;  // the least: one 128-row sequence
    auto s = run_and_compare<TestType, sched::Continuous>(m, rs, want, opt);
    CHECK(s.chunked_prefills > 0);
    if constexpr (std::is_same_v<TestType, Paged>) CHECK(s.preemptions > 0);
    if (!sample) run_and_compare<TestType, sched::Static>(m, rs, want, {.max_batch = 4});
  }
}
