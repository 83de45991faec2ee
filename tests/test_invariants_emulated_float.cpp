// SPDX-License-Identifier: Apache-2.0
// Serving invariants on the Emulated backend (see invariants_support.hpp), fp32 and 16-bit
// weights on tiny-a: {f32, f16, bf16} x {contiguous, paged4}, and the f16 and int8 caches with
// fp32 weights. All 10 of HF's reference decode steps.
#include <tuple>

#include "invariants_support.hpp"
#include "servekit/backend/emulated.hpp"

namespace sk = servekit;
namespace w = servekit::weights;
using sk::test::inv::Inv;
using Emu = sk::backend::Emulated;
using D = sk::dims::TinyA;

using Configs =
    std::tuple<Inv<D, w::F32, sk::kv::Contiguous, Emu>, Inv<D, w::F32, sk::kv::Paged<4>, Emu>,
               Inv<D, w::F16, sk::kv::Contiguous, Emu>, Inv<D, w::F16, sk::kv::Paged<4>, Emu>,
               Inv<D, w::BF16, sk::kv::Contiguous, Emu>, Inv<D, w::BF16, sk::kv::Paged<4>, Emu>,
               Inv<D, w::F32, sk::kv::ContiguousF16, Emu>, Inv<D, w::F32, sk::kv::PagedF16<4>, Emu>,
               Inv<D, w::F32, sk::kv::PagedI8<4>, Emu>>;

TEMPLATE_LIST_TEST_CASE("emulated: batch == alone, HF's logits, the host's logits (tiny-a)",
                        "[invariants][emulated]", Configs) {
  sk::test::inv::check_invariants<TestType>(10);
}
