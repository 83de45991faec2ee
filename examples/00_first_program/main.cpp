// SPDX-License-Identifier: Apache-2.0
// Your first servekit program (docs/first_program.md walks through it).
//
//   build/examples/00_first_program                    # random GPT-2 124M, no download
//   build/examples/00_first_program models/gpt2        # real weights: scripts/get_gpt2.sh
//
// It loads a model (or makes a seeded random one), tokenizes a prompt, generates with
// streaming, prints the request's metrics, then swaps one policy (the weight format) and runs
// the same prompt again.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

#include "servekit/servekit.hpp"

namespace sk = servekit;

// One composition: every axis is a type. Change one line to compare designs.
using F32 = sk::Config<sk::dims::Gpt2Small,  // 12 layers, 12 heads, d_model 768
                       sk::weights::F32,     // weight format
                       sk::kv::Contiguous,   // KV-cache layout
                       sk::lora::None,       // LoRA dispatch
                       sk::backend::Host>;   // where the kernels run
// The same model with weights stored as uint8 with one zero point and scale per column.
using U8 = sk::Config<sk::dims::Gpt2Small, sk::weights::U8ZeroPoint<sk::weights::PerChannel>>;

template <class Cfg>
sk::serve::Result run(const char* folder, const sk::text::Gpt2Tokenizer& tok,
                      const std::string& prompt) {
  // A folder in Hugging Face layout, or, offline, random weights of the same shape and cost.
  auto model = folder ? sk::Gpt2<Cfg>::load(folder) : sk::Gpt2<Cfg>::random(/*seed=*/1);
  std::printf("\n[%s] %s", sk::Gpt2<Cfg>::name().c_str(), prompt.c_str());
  sk::serve::GenerateOptions opt;
  opt.stop.max_new_tokens = 24;  // greedy unless a temperature > 0 is set
  opt.sampling.temperature = 0.f;
  auto r = sk::serve::generate(model, tok, tok.encode(prompt), opt,
                               [](std::string_view piece, const sk::serve::GeneratedToken&) {
                                 std::printf("%.*s", static_cast<int>(piece.size()), piece.data());
                                 std::fflush(stdout);
                                 return true;  // false would cancel
                               });
  const auto& m = r.metrics;
  std::printf("\n  %d prompt + %d generated tokens, finish '%s', TTFT %.1f ms, TPOT %.1f ms\n",
              m.prompt_tokens, m.generated_tokens, r.finish_reason.c_str(), m.ttft_ms, m.tpot_ms);
  return r;
}

int main(int argc, char** argv) {
  const char* folder = argc > 1 ? argv[1] : nullptr;
  try {
    // The model folder's own tokenizer files, else GPT-2's vocabulary.
    auto tok = sk::text::Gpt2Tokenizer::from_dir(
        sk::text::vocab_dir_for({}, folder ? folder : std::filesystem::path()));
    const std::string prompt = "The quick brown fox";
    std::printf("tokens of \"%s\":", prompt.c_str());
    for (int32_t id : tok.encode(prompt)) std::printf(" %d", id);
    if (!folder) std::printf("\n(no folder given: random weights, so the text is meaningless)");
    auto a = run<F32>(folder, tok, prompt);
    auto b = run<U8>(folder, tok, prompt);
    int same = 0;
    while (same < static_cast<int>(std::min(a.tokens.size(), b.tokens.size())) &&
           a.tokens[same].id == b.tokens[same].id)
      same++;
    std::printf("\nf32 and u8 agree on the first %d of %zu tokens\n", same, a.tokens.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "00_first_program: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
