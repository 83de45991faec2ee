// SPDX-License-Identifier: Apache-2.0
#pragma once
// The random tiny GPT-2 the host engine tests share, with room for 300-token prompts + 200 new
// tokens, on both cache layouts; one model of each, made once.
#include "servekit/model/gpt2.hpp"

namespace servekit::test::engine {

using D = dims::Tiny<2, 4, 64, 512, 512>;
using Contig = Gpt2<Config<D, weights::F32, kv::Contiguous>>;
using Paged = Gpt2<Config<D, weights::F32, kv::Paged<16>>>;

template <class Model>
Model& model() {
  static Model m = Model::random(11);
  return m;
}

}  // namespace servekit::test::engine
