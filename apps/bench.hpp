// SPDX-License-Identifier: Apache-2.0
#pragma once
// `servekit bench`: one composition's measurements. The model is made once (bench_as) and kept
// in a BenchSession, so that main() can interleave the compositions' rounds. Each measure(B)
// runs a fresh engine: by default B requests of the same prompt length, all submitted at once;
// with --rate, the arrivals workload (--requests requests of mixed lengths arriving at random,
// B the engine's max batch), where the schedulers part ways: a static batch waits for its
// longest member and admits nobody meanwhile, a continuous one refills each free slot.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
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
    // Distinct prompts, nothing shared between the requests of a run (no prefix-cache hits).
    for (int i = 0; i < std::max(64, a.requests); i++) {
      prompts_.emplace_back();
      for (int t = 0; t < a.prompt; t++) prompts_.back().push_back(id(rng));
    }
  }

  BenchRow measure(int batch) override {
    serve::EngineOptions eo{.max_batch = batch,
                            .max_batched_tokens = std::max(512, batch * a_.prompt)};
    serve::Engine<Model, typename C::Scheduler> engine(model_, tok_, eo);
    const bool arrivals = a_.rate > 0;
    std::mt19937_64 rng(a_.seed * 7919 + round_);  // every composition: the same workload
    std::vector<serve::Request> reqs(arrivals ? a_.requests : batch);
    for (std::size_t i = 0; i < reqs.size(); i++) {
      auto& r = reqs[i];
      r.prompt_ids = prompts_[(round_ * reqs.size() + i) % prompts_.size()];
      r.stop.max_new_tokens = a_.new_tokens;
      if (arrivals) {  // a quarter to all of --prompt and --new tokens
        r.prompt_ids.resize(std::max<std::size_t>(1, r.prompt_ids.size() * (1 + rng() % 4) / 4));
        r.stop.max_new_tokens = std::max(2, a_.new_tokens * static_cast<int>(1 + rng() % 4) / 4);
      }
      r.stop.stop_at_eos = false;
      r.sampling.temperature = 0;
      if constexpr (lora::enabled<typename C::Lora>)
        if (a_.adapters > 0) {
          const std::string id = "bench-" + std::to_string(i % a_.adapters);
          if (static_cast<int>(i) < a_.adapters) engine.adapters().add(id, adapter_dir_ / id);
          r.adapter = id;
        }
    }
    round_++;
    const double t0 = now_ms();
    const auto results =
        arrivals ? arrive(engine, std::move(reqs), rng) : engine.run_all(std::move(reqs));
    const double wall = now_ms() - t0;
    BenchRow row;
    if (arrivals) {  // throughput: every prompt and generated token over the whole run
      long prompt = 0, generated = 0;
      for (const auto& r : results) {
        if (r.finish_reason == serve::finish::error) fail("bench: a request failed: ", r.error);
        prompt += r.metrics.prompt_tokens, generated += r.metrics.generated_tokens;
      }
      row.prefill_tok_s = prompt / (wall / 1e3), row.decode_tok_s = generated / (wall / 1e3);
    }
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
    if (!arrivals) {
      row.prefill_tok_s = batch * a_.prompt / (last_first / 1e3);
      row.decode_tok_s = last_end > last_first ? decoded / ((last_end - last_first) / 1e3) : 0;
    }
    row.ttft_p50_ms = percentile(ttft, 50), row.ttft_p99_ms = percentile(ttft, 99);
    row.tpot_p50_ms = percentile(tpot, 50), row.tpot_p99_ms = percentile(tpot, 99);
    row.weight_mib = static_cast<double>(footprint(model_).weights()) / (1 << 20);
    // The engine's cache: batch full-length sequences, K and V of every layer.
    row.kv_mib = 2.0 * D::n_layer * D::n_embd * sizeof(typename C::Kv::Elem::type) * batch *
                 D::n_positions / (1 << 20);
    return row;
  }

 private:
  static double now_ms() {
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // Submits each request at its arrival time (exponential gaps at --rate per second, so a
  // Poisson process) and waits for every result; TTFT counts from the arrival.
  template <class E>
  std::vector<serve::Result> arrive(E& engine, std::vector<serve::Request> reqs,
                                    std::mt19937_64& rng) {
    std::exponential_distribution<double> gap(a_.rate);
    std::vector<serve::RequestHandle> hs;
    auto at = std::chrono::steady_clock::now();
    for (auto& r : reqs) {
      std::this_thread::sleep_until(at);
      hs.push_back(engine.submit(std::move(r)));
      at += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(gap(rng)));
    }
    std::vector<serve::Result> out;
    for (auto& h : hs) out.push_back(h.get());
    return out;
  }

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
