// SPDX-License-Identifier: Apache-2.0
// Lesson 5: LoRA.
//
// A fine-tuned variant of a model need not be a second copy of it: LoRA trains, for a linear
// y = x W (in -> out), two thin matrices A (r, in) and B (out, r) and serves
//   y = x W + scale * (x A^T) B^T,      scale = lora_alpha / r   (alpha / sqrt(r): rsLoRA)
// with r of 4..64 against in, out of 768..3072. This example, like the course:
//   1. counts what an adapter adds: |A| + |B| against |W| for each of GPT-2's four linears;
//   2. generates from the base model, then with the adapter applied at run time (unmerged,
//      lora::Gathered: W untouched, the delta computed per row), then with the adapter merged
//      into W at load (W' = W + scale A^T B^T: one matmul per linear again), and prints each
//      text with its time per token. Merged and unmerged give the same tokens;
//   3. unmerges: the base weights come back bit for bit.
// Look at: the parameter ratio in (1); in (2) that the adapter changes the text and that
// merged costs what the base model costs while unmerged pays for the extra products.
// --adapter DIR takes a PEFT adapter (adapter_config.json + adapter_model.safetensors); without
// it a random rank-8 adapter on every linear is made. With --model DIR it uses a Hugging Face
// GPT-2; without, a seeded random GPT-2 124M (same cost, meaningless text).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include "common/run.hpp"
#include "servekit/lora/adapter.hpp"
#include "servekit/lora/random_adapter.hpp"
#include "servekit/model/merge_lora.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/model/random_gpt2.hpp"
#include "servekit/serve/generate.hpp"

namespace sk = servekit;
namespace serve = servekit::serve;

struct Args {
  std::string model, vocab, adapter, prompt = "The quick brown fox jumped over the";
  int tokens = 24, rank = 8;
};

template <class D>
sk::lora::Adapter random_adapter(int rank) {
  std::mt19937_64 rng(5);
  return sk::lora::random_adapter<D>({.name = "random-r" + std::to_string(rank),
                                      .rank = rank,
                                      .alpha = 2.f * rank,
                                      .stddev = 0.05f},
                                     rng);
}

template <class Model>
serve::Result run(const char* label, Model& m, const sk::text::Gpt2Tokenizer& tok,
                  const std::vector<int32_t>& prompt, const Args& a, int32_t adapter = -1) {
  serve::GenerateOptions o;
  o.stop = {.max_new_tokens = a.tokens, .stop_at_eos = false};
  o.adapter = adapter;
  auto r = serve::generate(m, tok, prompt, o);
  const double ms =
      (r.metrics.e2e_ms - r.metrics.ttft_ms) / std::max<std::size_t>(1, r.tokens.size() - 1);
  std::printf("  %-9s %6.1f ms/token  |%s\n", label, ms, r.text.c_str());
  return r;
}

template <class D>
int lesson(const Args& a, const sk::text::Gpt2Tokenizer& tok) {
  constexpr int C = D::n_embd;
  std::printf("loading %s ...\n", a.model.empty() ? "random GPT-2 124M (seed 0)" : a.model.c_str());
  auto base = a.model.empty() ? sk::model::random_gpt2<D>(0) : sk::model::load_gpt2<D>(a.model);
  auto adapter =
      a.adapter.empty() ? random_adapter<D>(a.rank) : sk::lora::load_adapter<D>(a.adapter);

  std::printf("\n== 1. what adapter '%s' adds (r = %d, scale = %g)\n", adapter.name.c_str(),
              adapter.rank, adapter.scale);
  std::printf("%-12s %10s %10s %10s\n", "linear", "|W|", "|A|+|B|", "ratio");
  for (int t = 0; t < sk::lora::kTargets; t++) {
    const auto [in, out] = sk::lora::target_shape(static_cast<sk::lora::Target>(t), C);
    const long w = long(in) * out, ab = long(adapter.rank) * (in + out);
    std::printf("%-12s %10ld %10ld %9.2f%%\n", std::string(sk::lora::kTargetNames[t]).c_str(), w,
                ab, 100.0 * ab / w);
  }
  std::printf("whole adapter: %.2f MB of fp32 beside a %.0f MB model\n", adapter.bytes() / 1e6,
              base.num_params() * 4 / 1e6);

  const auto prompt = tok.encode(a.prompt);
  std::printf("\n== 2. greedy, %d tokens: base, unmerged, merged\n  prompt    |%s\n", a.tokens,
              a.prompt.c_str());
  sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Contiguous, sk::lora::Gathered>> unmerged(base);
  const int slot = unmerged.add_adapter(adapter);
  auto rb = run("base", unmerged, tok, prompt, a);
  auto ru = run("unmerged", unmerged, tok, prompt, a, slot);
  auto t = base;
  auto undo = sk::lora::merge(t, adapter);
  sk::Gpt2<sk::Config<D>> merged(t);
  auto rm = run("merged", merged, tok, prompt, a);
  std::printf("merged == unmerged tokens: %s; the adapter changed %s\n",
              rm.ids() == ru.ids() ? "yes" : "NO", rb.ids() != ru.ids() ? "the text" : "nothing");

  std::printf("\n== 3. unmerge\n");
  sk::lora::unmerge(t, std::move(undo));
  bool same = true;
  for (std::size_t l = 0; l < t.layers.size(); l++)
    for (auto p : {&sk::model::Gpt2LayerTensors::attn_w, &sk::model::Gpt2LayerTensors::attn_proj_w,
                   &sk::model::Gpt2LayerTensors::fc_w, &sk::model::Gpt2LayerTensors::mlp_proj_w})
      same = same && std::memcmp((t.layers[l].*p).data(), (base.layers[l].*p).data(),
                                 (base.layers[l].*p).size() * sizeof(float)) == 0;
  std::printf("base weights restored bit for bit: %s\n", same ? "yes" : "NO");
  return same && rm.ids() == ru.ids() ? 0 : 1;
}

int main(int argc, char** argv) {
  CLI::App app{"Lesson 5: LoRA"};
  Args a;
  sk::examples::add_model_options(app, a.model, a.vocab);
  app.add_option("--adapter", a.adapter, "PEFT LoRA adapter folder (default: a random one)");
  app.add_option("--rank", a.rank, "rank of the random adapter")->check(CLI::Range(1, 256));
  app.add_option("--prompt", a.prompt, "prompt text");
  app.add_option("--tokens", a.tokens, "tokens to generate")->check(CLI::Range(1, 512));
  CLI11_PARSE(app, argc, argv);
  return sk::examples::run_lesson(
      "05_lora", a.model, a.vocab,
      [&]<class D>(std::type_identity<D>, const sk::text::Gpt2Tokenizer& tok) {
        return lesson<D>(a, tok);
      });
}
