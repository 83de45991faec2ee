// SPDX-License-Identifier: Apache-2.0
#pragma once
// Layout policy -> cache class.
#include "servekit/kv/contiguous_cache.hpp"
#include "servekit/kv/paged_cache.hpp"
#include "servekit/kv/policy.hpp"

namespace servekit::kv {

template <class K>
struct CacheFor {
  static_assert(sizeof(K) == 0, "servekit: no KV cache for this kv layout policy");
};
template <class E>
struct CacheFor<BasicContiguous<E>> {
  using type = ContiguousCache<BasicContiguous<E>>;
};
template <int BT, class E>
struct CacheFor<Paged<BT, E>> {
  using type = PagedCache<Paged<BT, E>>;
};
template <class K>
using cache_t = typename CacheFor<K>::type;

}  // namespace servekit::kv
