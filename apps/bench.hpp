// SPDX-License-Identifier: Apache-2.0
#pragma once
// `servekit bench`: one composition's measurements. The model is made once (bench_as) and kept
// in a BenchSession, so that main() can interleave the compositions' rounds; each measure(B)
// runs B requests of the same prompt length through a fresh engine, all submitted at once.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "job.hpp"
#include "servekit/lora/random_adapter.hpp"
#include "servekit/lora/save_adapter.hpp"
#include "servekit/model/footprint.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/model/load_gpt2.hpp"
#include "servekit/model/random_gpt2.hpp"
#include "servekit/serve/engine.hpp"

namespace servekit::cli {

// The p-th percentile (0..100) of v, by the nearest rank.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t k = static_cast<std::size_t>(p / 100.0 * (v.size() - 1) + 0.5);
  return v[std::min(k, v.size() - 1)];
}

template <class C, class D>
class Session final : public BenchSession {
 public:
  using Model = Gpt2<typename C::template Config<D>>;

  Session(const BenchArgs& a, const text::Gpt2Tokenizer& tok, std::filesystem::path adapter_dir)
      : a_(a), tok_(tok), model_(tensors(a)), adapter_dir_(std::move(adapter_dir)) {
    std::mt19937_64 rng(a.seed + 1);
    std::uniform_int_distribution<int32_t> id(0, D::vocab - 1);
    for (int i = 0; i < 64; i++) {  // distinct prompts: nothing is shared between requests
      prompts_.emplace_back();
      for (int t = 0; t < a.prompt; t++) prompts_.back().push_back(id(rng));
    }
  }

  BenchRow measure(int batch) override {
    serve::EngineOptions eo{.max_batch = batch,
                            .max_batched_tokens = std::max(512, batch * a_.prompt)};
    serve::Engine<Model, typename C::Scheduler> engine(model_, tok_, eo);
    std::vector<serve::Request> reqs(batch);
    for (int i = 0; i < batch; i++) {
      reqs[i].prompt_ids = prompts_[(round_ * batch + i) % prompts_.size()];
      reqs[i].stop.max_new_tokens = a_.new_tokens;
      reqs[i].stop.stop_at_eos = false;
      reqs[i].sampling.temperature = 0;
      if constexpr (lora::enabled<typename C::Lora>)
        if (a_.adapters > 0) {
          const std::string id = "bench-" + std::to_string(i % a_.adapters);
          if (i < a_.adapters) engine.adapters().add(id, adapter_dir_ / id);
          reqs[i].adapter = id;
        }
    }
    round_++;
    const auto results = engine.run_all(std::move(reqs));
    BenchRow row;
    std::vector<double> ttft, tpot;
    double last_first = 0, last_end = 0;
    long decoded = 0;
    for (const auto& r : results) {
      if (r.finish_reason == serve::finish::error) fail("bench: a request failed: ", r.error);
      ttft.push_back(r.metrics.ttft_ms);
      for (double g : r.metrics.gaps_ms) tpot.push_back(g);
      last_first = std::max(last_first, r.metrics.ttft_ms);
      last_end = std::max(last_end, r.metrics.e2e_ms);
      decoded += static_cast<long>(r.tokens.size()) - 1;
    }
    row.prefill_tok_s = batch * a_.prompt / (last_first / 1e3);
    row.decode_tok_s = last_end > last_first ? decoded / ((last_end - last_first) / 1e3) : 0;
    row.ttft_p50_ms = percentile(ttft, 50), row.ttft_p99_ms = percentile(ttft, 99);
    row.tpot_p50_ms = percentile(tpot, 50), row.tpot_p99_ms = percentile(tpot, 99);
    row.weight_mib = static_cast<double>(footprint(model_).weights()) / (1 << 20);
    // The engine's cache: batch full-length sequences, K and V of every layer.
    row.kv_mib = 2.0 * D::n_layer * D::n_embd * sizeof(typename C::Kv::Elem::type) * batch *
                 D::n_positions / (1 << 20);
    return row;
  }

 private:
  static model::Gpt2Tensors tensors(const BenchArgs& a) {
    return a.model.empty() ? model::random_gpt2<D>(a.seed) : model::load_gpt2<D>(a.model);
  }

  const BenchArgs& a_;
  const text::Gpt2Tokenizer& tok_;
  Model model_;
  std::filesystem::path adapter_dir_;
  std::vector<std::vector<int32_t>> prompts_;
  int round_ = 0;
};

// Makes the composition's session; with --adapters N, N random rank-8 adapters on every linear
// are written once under the output's folder and registered by every engine.
template <class C, class D>
int bench_as(const Job& job) {
  const BenchArgs& a = *job.bench;
  std::filesystem::path dir = std::filesystem::path(a.out + "_adapters") / std::string(D::name);
  if constexpr (lora::enabled<typename C::Lora>) {
    std::mt19937_64 rng(a.seed + 7);
    for (int i = 0; i < a.adapters; i++) {
      const std::string id = "bench-" + std::to_string(i);
      if (std::filesystem::exists(dir / id / "adapter_config.json")) continue;
      lora::save_adapter(lora::random_adapter<D>(lora::RandomAdapterSpec{.name = id}, rng),
                         dir / id);
    }
  } else if (a.adapters > 0) {
    fail(
        "bench: --adapters needs a LoRA dispatch (--lora gathered, loop or segmented, or "
        "--compare lora=...)");
  }
  *job.bench_out = std::make_unique<Session<C, D>>(a, *job.tok, dir);
  return 0;
}

}  // namespace servekit::cli
