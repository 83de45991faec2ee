// SPDX-License-Identifier: Apache-2.0
// Serving invariants on the Emulated backend (see invariants_support.hpp), zero-point uint8
// weights on tiny-a: {per tensor, per channel, group 32} x {contiguous, paged4}, and an f16
// paged cache with per-channel weights. HF's 10 reference decode steps.
#include <tuple>

#include "invariants_support.hpp"
#include "servekit/backend/emulated.hpp"

namespace sk = servekit;
namespace w = servekit::weights;
using sk::test::inv::Inv;
using Emu = sk::backend::Emulated;
using D = sk::dims::TinyA;
using U8T = w::U8ZeroPoint<w::PerTensor>;
using U8C = w::U8ZeroPoint<w::PerChannel>;
using U8G = w::U8ZeroPoint<w::Group<32>>;

using Configs = std::tuple<Inv<D, U8T, sk::kv::Contiguous, Emu>, Inv<D, U8T, sk::kv::Paged<4>, Emu>,
                           Inv<D, U8C, sk::kv::Contiguous, Emu>, Inv<D, U8C, sk::kv::Paged<4>, Emu>,
                           Inv<D, U8G, sk::kv::Contiguous, Emu>, Inv<D, U8G, sk::kv::Paged<4>, Emu>,
                           Inv<D, U8C, sk::kv::PagedF16<4>, Emu>>;

TEMPLATE_LIST_TEST_CASE("emulated: batch == alone, the host's logits (tiny-a, uint8 weights)",
                        "[invariants][emulated]", Configs) {
  sk::test::inv::check_invariants<TestType>(10);
}
