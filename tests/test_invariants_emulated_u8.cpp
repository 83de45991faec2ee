// SPDX-License-Identifier: Apache-2.0
// Serving invariants on the Emulated backend (see invariants_support.hpp), 8-bit weights on
// tiny-a: zero-point uint8 {per tensor, per channel, group 32} x {contiguous, paged4}, and an
// f16 paged cache with per-channel weights; W8A8 per channel (contiguous) and in groups of 32
// with the int8 paged cache. HF's 10 reference decode steps.
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
using W8C = w::W8A8<w::PerChannel>;
using W8G = w::W8A8<w::Group<32>>;

using Configs =
    std::tuple<Inv<D, U8T, sk::kv::Contiguous, Emu>, Inv<D, U8T, sk::kv::Paged<4>, Emu>,
               Inv<D, U8C, sk::kv::Contiguous, Emu>, Inv<D, U8C, sk::kv::Paged<4>, Emu>,
               Inv<D, U8G, sk::kv::Contiguous, Emu>, Inv<D, U8G, sk::kv::Paged<4>, Emu>,
               Inv<D, U8C, sk::kv::PagedF16<4>, Emu>, Inv<D, W8C, sk::kv::Contiguous, Emu>,
               Inv<D, W8G, sk::kv::PagedI8<4>, Emu>>;

TEMPLATE_LIST_TEST_CASE("emulated: batch == alone, the host's logits (tiny-a, 8-bit weights)",
                        "[invariants][emulated]", Configs) {
  sk::test::inv::check_invariants<TestType>(10);
}
