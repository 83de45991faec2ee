// SPDX-License-Identifier: Apache-2.0
#pragma once
// The serving invariants of invariants_support.hpp (a row's tokens whatever shares its batch;
// HF's logits; the host's logits) on a backend whose weights, scratch and KV caches live in
// device memory, `DeviceBackend`, which the includer names: EmulatedDevice in
// test_invariants_device_storage (host compiler, the emulator), Cuda in test_invariants_cuda
// (nvcc, for a GPU). One composition of each weight family and cache kind.
#include <tuple>

#include "invariants_support.hpp"

namespace device_inv {
namespace sk = servekit;
namespace w = servekit::weights;
using sk::test::inv::Inv;
using D = sk::dims::TinyA;
using Configs = std::tuple<Inv<D, w::F32, sk::kv::Contiguous, DeviceBackend>,
                           Inv<D, w::F32, sk::kv::Paged<4>, DeviceBackend>,
                           Inv<D, w::F16, sk::kv::Paged<4>, DeviceBackend>,
                           Inv<D, w::BF16, sk::kv::Contiguous, DeviceBackend>,
                           Inv<D, w::U8ZeroPoint<w::PerChannel>, sk::kv::Paged<4>, DeviceBackend>,
                           Inv<D, w::F32, sk::kv::PagedF16<4>, DeviceBackend>,
                           Inv<D, w::W8A8<w::PerChannel>, sk::kv::PagedI8<4>, DeviceBackend>>;
}  // namespace device_inv

TEMPLATE_LIST_TEST_CASE("device storage: batch == alone, HF's logits, the host's logits (tiny-a)",
                        "[invariants][device]", device_inv::Configs) {
  servekit::test::inv::check_invariants<TestType>(10);
}
