// SPDX-License-Identifier: Apache-2.0
#pragma once
// Config: one composition of policies. Every benchmark line prints Config::name() so it says
// exactly which composition ran.
#include <string>

#include "servekit/backend/policy.hpp"
#include "servekit/kv/policy.hpp"
#include "servekit/lora/policy.hpp"
#include "servekit/core/dims.hpp"
#include "servekit/weights/policy.hpp"

namespace servekit {

template <dims::ModelDims D, weights::WeightFormat W = weights::F32,
          kv::KvLayout K = kv::Contiguous, lora::LoraDispatch L = lora::None,
          backend::Backend B = backend::Host>
struct Config {
  using Dims = D;
  using Weights = W;
  using Kv = K;
  using Lora = L;
  using Backend = B;

  static std::string name() {
    std::string s;
    for (auto part : {D::name, W::name, K::name, L::name, B::name}) {
      if (!s.empty()) s += '/';
      s += part;
    }
    return s;
  }
};

}  // namespace servekit
