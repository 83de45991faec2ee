// SPDX-License-Identifier: Apache-2.0
// Serving invariants on the Emulated backend (see invariants_support.hpp) on tiny-b (3 heads
// of 32, bf16 checkpoint): one composition per weight family and cache kind; 10 decode steps.
#include <tuple>

#include "invariants_support.hpp"
#include "servekit/backend/emulated.hpp"

namespace sk = servekit;
namespace w = servekit::weights;
using sk::test::inv::Inv;
using Emu = sk::backend::Emulated;
using D = sk::dims::TinyB;

using Configs =
    std::tuple<Inv<D, w::F32, sk::kv::Contiguous, Emu>, Inv<D, w::BF16, sk::kv::Paged<4>, Emu>,
               Inv<D, w::F16, sk::kv::ContiguousF16, Emu>,
               Inv<D, w::U8ZeroPoint<w::Group<32>>, sk::kv::Paged<4>, Emu>,
               Inv<D, w::U8ZeroPoint<w::PerTensor>, sk::kv::PagedF16<4>, Emu>>;

TEMPLATE_LIST_TEST_CASE("emulated: batch == alone, HF's logits, the host's logits (tiny-b)",
                        "[invariants][emulated]", Configs) {
  sk::test::inv::check_invariants<TestType>(10);
}
