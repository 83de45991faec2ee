// SPDX-License-Identifier: Apache-2.0
#pragma once
// Layout policy (and storage) -> cache class.
#include "servekit/kv/contiguous_cache.hpp"
#include "servekit/kv/paged_cache.hpp"
#include "servekit/kv/policy.hpp"

namespace servekit::kv {

template <class K, class S>
struct CacheFor {
  static_assert(sizeof(K) == 0, "servekit: no KV cache for this kv layout policy");
};
template <class E, class S>
struct CacheFor<BasicContiguous<E>, S> {
  using type = ContiguousCache<BasicContiguous<E>, S>;
};
template <int BT, class E, class S>
struct CacheFor<Paged<BT, E>, S> {
  using type = PagedCache<Paged<BT, E>, S>;
};
template <class K, class S = HostStorage>
using cache_t = typename CacheFor<K, S>::type;

}  // namespace servekit::kv
