// SPDX-License-Identifier: Apache-2.0
#include <cstdio>
#include <servekit/servekit.hpp>

namespace sk = servekit;

int main() {
  using Model = sk::Gpt2<sk::Config<sk::dims::Tiny<1, 2, 16, 64, 32>>>;
  auto model = Model::random(1);
  auto cache = model.make_cache(1);
  std::vector<int32_t> prompt{1, 2, 3};
  sk::model::SeqStep s{0, 0, 3};
  std::vector<float> logits;
  model.forward(cache, {prompt, std::span(&s, 1)}, logits);
  std::printf("%s next token %d\n", Model::name().c_str(), sk::serve::argmax(logits));
  return logits.size() == 64 ? 0 : 1;
}
