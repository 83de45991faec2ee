// SPDX-License-Identifier: Apache-2.0
// servekit's side of bench/peers: loads a Hugging Face GPT-2 124M checkpoint in one weight
// format, runs one measurement and prints it as one JSON line. Each measurement is its own
// process, as every peer engine's is (bench/peers/peers.py runs them in interleaved rounds), so
// no run inherits another's allocator state or warm caches.
//   --mode prefill  time to the first token's logits of a --prompt-token prompt, batch 1
//                   (--reps N: N prefills in this process, each timed; seconds is the
//                   median, best_seconds the fastest; peers.py runs one)
//   --mode decode   --steps greedy decode steps after a prefill of --batch rows, aggregate
//   --mode ids      the greedy ids of --steps new tokens after --ids (the agreement check)
//   --mode peaks    this machine's ceilings at --threads threads, measured now (bench/common.hpp):
//                   read bandwidth, fp32 FMA peak, and the int8 dot-product peak of the
//                   instruction W8A8's tiles use here (no --model needed)
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "../common.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/sampling.hpp"

// The compositions this program may run, named as everywhere else (serve/compiled.hpp's
// dispatch table turns --format and --kv into one of them): each weight format the peers have,
// with an f32 or an f16 cache (llama.cpp's default), W8A8, and the int8 cache under each class.
#define SERVEKIT_COMPILED_COMPOSITIONS                                                             \
  "f32/contiguous/none/continuous/host", "f32/contiguous-f16/none/continuous/host",                \
      "f16/contiguous/none/continuous/host", "f16/contiguous-f16/none/continuous/host",            \
      "bf16/contiguous/none/continuous/host", "bf16/contiguous-f16/none/continuous/host",          \
      "u8-channel/contiguous/none/continuous/host",                                                \
      "u8-channel/contiguous-f16/none/continuous/host",                                            \
      "w8a8-channel/contiguous/none/continuous/host",                                              \
      "w8a8-channel/contiguous-f16/none/continuous/host",                                          \
      "w8a8-channel/contiguous-i8/none/continuous/host", "f32/contiguous-i8/none/continuous/host", \
      "f16/contiguous-i8/none/continuous/host"
#include "servekit/serve/compiled.hpp"

namespace sk = servekit;
using D = sk::dims::Gpt2Small;

struct Opts {
  std::string model, format = "f32", mode = "decode", kv = "f32";
  int prompt = 128, steps = 128, batch = 1, threads = 2, reps = 1;
  std::vector<int32_t> ids;
};

// Row b's prompt. peers.py's prompt_row() computes the same ids, so every engine reads the
// same tokens; distinct rows keep a batch from being one sequence computed B times.
std::vector<int32_t> prompt_row(int b, int n) {
  std::vector<int32_t> row(static_cast<std::size_t>(n));
  for (int i = 0; i < n; i++) row[i] = static_cast<int32_t>((1 + b * 131 + i * 7919) % D::vocab);
  return row;
}

template <class Model>
class Runner {
 public:
  Runner(Model& model, int rows, int max_len)
      : model_(model), cache_(model.make_cache(rows, max_len)) {}

  // Every row's prompt in one forward; returns each row's greedy first token.
  std::vector<int32_t> prefill(const std::vector<std::vector<int32_t>>& prompts) {
    tokens_.clear();
    seqs_.clear();
    for (std::size_t b = 0; b < prompts.size(); b++) {
      tokens_.insert(tokens_.end(), prompts[b].begin(), prompts[b].end());
      seqs_.push_back({static_cast<int32_t>(b), 0, static_cast<int32_t>(prompts[b].size())});
    }
    model_.forward(cache_, {tokens_, seqs_}, logits_);
    return pick();
  }

  // One decode step of every row, each fed its previous token.
  std::vector<int32_t> step(const std::vector<int32_t>& last) {
    for (auto& s : seqs_) s = {s.slot, s.n_past + s.n_new, 1};
    model_.forward(cache_, {last, seqs_}, logits_);
    return pick();
  }

 private:
  std::vector<int32_t> pick() const {
    std::vector<int32_t> out;
    for (std::size_t b = 0; b < seqs_.size(); b++)
      out.push_back(sk::serve::argmax(std::span(logits_).subspan(b * D::vocab, D::vocab)));
    return out;
  }

  Model& model_;
  typename Model::Cache cache_;
  std::vector<int32_t> tokens_;
  std::vector<sk::model::SeqStep> seqs_;
  std::vector<float> logits_;
};

std::vector<std::vector<int32_t>> prompts(int rows, int n) {
  std::vector<std::vector<int32_t>> p;
  for (int b = 0; b < rows; b++) p.push_back(prompt_row(b, n));
  return p;
}

template <class Model>
nlohmann::json measure(const Opts& o, Model& model) {
  nlohmann::json j = {{"engine", "servekit"},
                      {"format", o.format},
                      {"measure", o.mode},
                      {"composition", Model::name()},
                      {"threads", sk::host_threads()},
                      {"isa", sk::kernels::host::kIsa}};
  if (o.mode == "ids") {
    Runner<Model> r(model, 1, static_cast<int>(o.ids.size()) + o.steps);
    std::vector<int32_t> out = r.prefill({o.ids});
    std::vector<int32_t> ids = out;
    while (static_cast<int>(ids.size()) < o.steps) {
      out = r.step(out);
      ids.push_back(out[0]);
    }
    j["ids"] = ids;
    return j;
  }
  const int rows = o.mode == "prefill" ? 1 : o.batch;
  Runner<Model> r(model, rows, o.prompt + o.steps + 1);
  // Untimed warm-up at the same batch: the first pass over the weights pays their page faults
  // and the kernels' scratch allocations.
  r.step(r.prefill(prompts(rows, 8)));
  const auto p = prompts(rows, o.prompt);
  std::vector<double> times;
  std::vector<int32_t> last;
  for (int i = 0; i < o.reps; i++) {
    const double t0 = sk::bench::now_s();
    last = r.prefill(p);
    times.push_back(sk::bench::now_s() - t0);
  }
  std::sort(times.begin(), times.end());
  const double t_prefill = times[times.size() / 2];
  j["batch"] = rows;
  j["prompt"] = o.prompt;
  if (o.mode == "prefill") {
    j["seconds"] = t_prefill;
    j["tokens_per_s"] = o.prompt / t_prefill;
    if (o.reps > 1) j["reps"] = o.reps, j["best_seconds"] = times.front();
    return j;
  }
  const double t0 = sk::bench::now_s();
  for (int s = 0; s < o.steps; s++) last = r.step(last);
  const double dt = sk::bench::now_s() - t0;
  j["steps"] = o.steps;
  j["seconds"] = dt;
  j["tokens_per_s"] = static_cast<double>(rows) * o.steps / dt;
  return j;
}

// The composition --format and --kv name, from the dispatch table.
nlohmann::json run(const Opts& o, sk::model::Gpt2Tensors t) {
  const std::string name = (o.format == "u8"     ? "u8-channel"
                            : o.format == "w8a8" ? "w8a8-channel"
                                                 : o.format) +
                           "/" +
                           (o.kv == "f16"  ? "contiguous-f16"
                            : o.kv == "i8" ? "contiguous-i8"
                                           : "contiguous") +
                           "/none/continuous/host";
  return sk::serve::dispatch_composition(
      sk::serve::spec_from_name(name), [&]<class C>(std::type_identity<C>) {
        sk::Gpt2<typename C::template Config<D>> model(std::move(t));  // quantizes here, untimed
        nlohmann::json j = measure(o, model);
        j["kv"] = o.kv;
        return j;
      });
}

int main(int argc, char** argv) {
  CLI::App app{"bench_peers_servekit: one servekit measurement of a GPT-2 124M HF checkpoint"};
  Opts o;
  app.add_option("--model", o.model, "Hugging Face GPT-2 124M folder (every mode but peaks)");
  app.add_option("--format", o.format, "weight format")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "u8", "w8a8"}));
  app.add_option("--mode", o.mode, "what to measure")
      ->check(CLI::IsMember({"prefill", "decode", "ids", "peaks"}));
  app.add_option("--prompt", o.prompt, "prompt tokens per row")->check(CLI::Range(1, 512));
  app.add_option("--steps", o.steps, "decode steps (ids: new tokens)")->check(CLI::Range(1, 511));
  app.add_option("--batch", o.batch, "rows decoded together")->check(CLI::Range(1, 256));
  app.add_option("--threads", o.threads, "host threads")->check(CLI::PositiveNumber);
  app.add_option("--reps", o.reps, "prefill: timed prefills in this process (median printed)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--kv", o.kv, "KV cache element type (llama.cpp's default is f16)")
      ->check(CLI::IsMember({"f32", "f16", "i8"}));
  app.add_option("--ids", o.ids, "prompt ids for --mode ids")->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  if (o.reps > 1 && o.mode != "prefill") {
    std::fprintf(stderr, "bench_peers_servekit: --reps %d is for --mode prefill, not %s\n", o.reps,
                 o.mode.c_str());
    return 2;
  }
  if (o.mode == "ids" && o.ids.empty()) {
    std::fprintf(stderr, "bench_peers_servekit: --mode ids needs --ids\n");
    return 2;
  }
  sk::set_host_threads(o.threads);
  if (o.mode == "peaks") {
    const double bw = sk::bench::read_bandwidth_gbs(), fma = sk::bench::fma_gflops();
    const double i8 = sk::bench::int8_gops();
    const nlohmann::json j{{"mode", "peaks"}, {"threads", o.threads},
                           {"read_gbs", bw},  {"fma_gflops", fma},
                           {"int8_gops", i8}, {"int8_isa", sk::kernels::host::kI8Isa}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  if (o.model.empty()) {
    std::fprintf(stderr, "bench_peers_servekit: --mode %s needs --model\n", o.mode.c_str());
    return 2;
  }

  try {
    auto t = sk::model::load_gpt2<D>(o.model);
    const nlohmann::json j = run(o, std::move(t));
    std::printf("%s\n", j.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_peers_servekit: %s\n", e.what());
    return 1;
  }
  return 0;
}
