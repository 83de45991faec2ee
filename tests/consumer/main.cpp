// SPDX-License-Identifier: Apache-2.0
// What a consumer's first program does; run.cmake checks what it prints.
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
  // The vocabulary that ships with servekit, found without being told where.
  const auto tok = sk::text::Gpt2Tokenizer::gpt2();
  const auto ids = tok.encode("Hello world");
  std::printf("vocab %s\nHello world ->", sk::text::default_vocab_dir().c_str());
  for (int32_t id : ids) std::printf(" %d", id);
    // How the library's code was compiled in this program.
#ifdef __OPTIMIZE__
  const int optimized = 1;
#else
  const int optimized = 0;
#endif
#ifdef __AVX2__
  const int avx2 = 1;
#else
  const int avx2 = 0;
#endif
  std::printf("\noptimized %d avx2 %d\n", optimized, avx2);
  return logits.size() == 64 ? 0 : 1;
}
