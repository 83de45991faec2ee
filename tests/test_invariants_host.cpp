// SPDX-License-Identifier: Apache-2.0
// Serving invariants on the host backend (see invariants_support.hpp): every weight format x
// {contiguous, paged4} on tiny-a and tiny-b, the f16 and int8 caches on an fp32 and a uint8
// format, W8A8 (per channel, also with the int8 cache; per group of 32);
// HF's 10 reference decode steps.
#include <tuple>

#include "invariants_support.hpp"

namespace sk = servekit;
namespace w = servekit::weights;
using sk::test::inv::Inv;
using Host = sk::backend::Host;
using U8T = w::U8ZeroPoint<w::PerTensor>;
using U8C = w::U8ZeroPoint<w::PerChannel>;
using U8G = w::U8ZeroPoint<w::Group<32>>;
using W8C = w::W8A8<w::PerChannel>;
using W8G = w::W8A8<w::Group<32>>;

template <class D>
using Layouts =
    std::tuple<Inv<D, w::F32, sk::kv::Contiguous, Host>, Inv<D, w::F32, sk::kv::Paged<4>, Host>,
               Inv<D, w::F16, sk::kv::Contiguous, Host>, Inv<D, w::F16, sk::kv::Paged<4>, Host>,
               Inv<D, w::BF16, sk::kv::Contiguous, Host>, Inv<D, w::BF16, sk::kv::Paged<4>, Host>,
               Inv<D, U8T, sk::kv::Contiguous, Host>, Inv<D, U8T, sk::kv::Paged<4>, Host>,
               Inv<D, U8C, sk::kv::Contiguous, Host>, Inv<D, U8C, sk::kv::Paged<4>, Host>,
               Inv<D, U8G, sk::kv::Contiguous, Host>, Inv<D, U8G, sk::kv::Paged<4>, Host>,
               Inv<D, w::F32, sk::kv::ContiguousF16, Host>,
               Inv<D, w::F32, sk::kv::PagedF16<4>, Host>, Inv<D, U8C, sk::kv::ContiguousF16, Host>,
               Inv<D, U8G, sk::kv::PagedF16<4>, Host>, Inv<D, w::F32, sk::kv::ContiguousI8, Host>,
               Inv<D, w::F32, sk::kv::PagedI8<4>, Host>, Inv<D, U8C, sk::kv::PagedI8<4>, Host>,
               Inv<D, W8C, sk::kv::Contiguous, Host>, Inv<D, W8C, sk::kv::PagedI8<4>, Host>,
               Inv<D, W8G, sk::kv::Paged<4>, Host>>;

TEMPLATE_LIST_TEST_CASE("host: batch == alone, HF's logits and tokens (tiny-a)",
                        "[invariants][host]", Layouts<sk::dims::TinyA>) {
  sk::test::inv::check_invariants<TestType>(10);
}

TEMPLATE_LIST_TEST_CASE("host: batch == alone, HF's logits and tokens (tiny-b)",
                        "[invariants][host]", Layouts<sk::dims::TinyB>) {
  sk::test::inv::check_invariants<TestType>(10);
}
