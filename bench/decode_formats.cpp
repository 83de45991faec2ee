// SPDX-License-Identifier: Apache-2.0
// Decode throughput of GPT-2 124M (random weights) on the host backend in every weight
// format, at batches 1, 8 and 16 (--batches),
// and prefill tokens/s of one 128-token prompt (batch "pre"). A decode step reads every weight once
// whatever the batch, so at batch 1 its ceiling is read bandwidth / weight bytes, and fewer bytes
// per weight should buy proportionally more tokens/s; at batch 16 those bytes are shared by 16
// tokens and compute (including the dequantisation) matters more. Bandwidth and the cores' peak
// multiply-add rate are measured in the same run; "floor" is the step time neither can beat:
// max(bytes / bandwidth, flops / peak), the bytes being the weights once plus the K/V rows the
// batch's attention reads, the flops 2 per multiply-add of the linears, lm_head and attention.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <tuple>

#include "common.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/sampling.hpp"

namespace sk = servekit;
using D = sk::dims::Gpt2Small;

struct Opts {
  int prefill = 16, decode = 16, prompt = 128;
  std::vector<int> batches{1, 8, 16};
  std::string only;  // run the formats whose name contains this
  double bw = 0, gflops = 0;
};

// A decode step's minimum bytes and flops at batch B, every sequence at context ctx (the mean
// over the timed steps): weights once, each sequence's K and V rows of every layer read once.
struct StepCost {
  double bytes, flops;
};
template <class Model>
StepCost step_cost(const Model& model, int B, double ctx) {
  constexpr double C = D::n_embd, L = D::n_layer;
  const double kv_elem = sizeof(typename Model::Config::Kv::Elem::type);
  const double macs_per_token = L * 12 * C * C + double(D::vocab) * C + L * 2 * ctx * C;
  return {static_cast<double>(model.weight_bytes()) + B * L * 2 * ctx * C * kv_elem,
          2 * B * macs_per_token};
}

template <class F>
void bench_format(const Opts& o, const sk::model::Gpt2Tensors& t) {
  using Model = sk::Gpt2<sk::Config<D, F>>;
  if (Model::name().find(o.only) == std::string::npos) return;
  std::fprintf(stderr, "%s: quantizing ...\n", Model::name().c_str());
  Model model(t);
  const double wbytes = static_cast<double>(model.weight_bytes());
  {  // prefill of one prompt, after an untimed one that pays the weights' page faults
    auto cache = model.make_cache(1, o.prompt + 1);
    std::vector<int32_t> tokens;
    for (int i = 0; i < o.prompt; i++) tokens.push_back((i * 7919) % D::vocab);
    const std::vector<sk::model::SeqStep> seq{{0, 0, o.prompt}};
    std::vector<float> logits;
    model.forward(cache, {tokens, seq}, logits);
    const double t0 = sk::bench::now_s();
    model.forward(cache, {tokens, seq}, logits);
    std::printf("%-34s %5s %10.1f %12s %10s %12.2f %13s %9s\n", Model::name().c_str(), "pre",
                wbytes / 1048576.0, "", "", o.prompt / (sk::bench::now_s() - t0), "", "");
  }
  double tps1 = 0;
  for (int B : o.batches) {
    std::fprintf(stderr, "%s: batch %d, prefill %d + decode %d ...\n", Model::name().c_str(), B,
                 o.prefill, o.decode);
    auto cache = model.make_cache(B, o.prefill + o.decode + 1);
    std::vector<int32_t> tokens;
    std::vector<sk::model::SeqStep> seqs;
    for (int b = 0; b < B; b++) {
      for (int i = 0; i < o.prefill; i++) tokens.push_back((b * 131 + i * 7919) % D::vocab);
      seqs.push_back({b, 0, o.prefill});
    }
    std::vector<float> logits;
    model.forward(cache, {tokens, seqs}, logits);  // prefill, also warms the pages
    const double t0 = sk::bench::now_s();
    for (int s = 0; s < o.decode; s++) {
      tokens.clear();
      for (int b = 0; b < B; b++) {
        tokens.push_back(sk::serve::argmax(
            std::span(logits).subspan(static_cast<std::size_t>(b) * D::vocab, D::vocab)));
        seqs[b] = {b, seqs[b].n_past + seqs[b].n_new, 1};
      }
      model.forward(cache, {tokens, seqs}, logits);
    }
    const double dt = sk::bench::now_s() - t0;
    const double steps_s = o.decode / dt, tps = B * steps_s;
    const double roof_steps = o.bw * 1e9 / wbytes;  // steps/s if only weight reads counted
    const StepCost cost = step_cost(model, B, o.prefill + (o.decode + 1) / 2.0);
    const double floor_ms =
        1e3 * std::max(cost.bytes / (o.bw * 1e9), cost.flops / (o.gflops * 1e9));
    if (B == 1) tps1 = tps;
    std::printf("%-34s %5d %10.1f %12.2f %10.2f %12.2f %13.2f %8.0f%% %8.2fx %9.2f %9.2f\n",
                Model::name().c_str(), B, wbytes / 1048576.0, wbytes / B / 1048576.0, steps_s, tps,
                B * roof_steps, 100 * steps_s / roof_steps, tps1 > 0 ? tps / tps1 : 0.0,
                1e3 / steps_s, floor_ms);
    std::fflush(stdout);
  }
}

int main(int argc, char** argv) {
  CLI::App app{"bench_decode_formats: GPT-2 124M decode per weight format, host backend"};
  Opts o;
  app.add_option("--prefill", o.prefill, "prompt tokens per sequence");
  app.add_option("--decode", o.decode, "decode steps");
  app.add_option("--prompt", o.prompt, "tokens of the prompt whose prefill is timed (batch 'pre')");
  app.add_option("--batches", o.batches, "decode batch sizes");
  app.add_option("--only", o.only, "only the compositions whose name contains this, e.g. f16");
  CLI11_PARSE(app, argc, argv);

  std::fprintf(stderr, "measuring read bandwidth ...\n");
  o.bw = sk::bench::read_bandwidth_gbs();
  std::fprintf(stderr, "measuring the multiply-add peak ...\n");
  o.gflops = sk::bench::fma_gflops();
  std::fprintf(stderr, "making random GPT-2 124M ...\n");
  const auto t = sk::model::random_gpt2<D>(1);
  std::printf(
      "host backend, %d threads, read bandwidth %.2f GB/s, fp32 FMA peak %.1f GFLOP/s "
      "(measured, this run)\n",
      servekit::host_threads(), o.bw, o.gflops);
  std::printf(
      "roofline: tokens/s if a step cost only reading the weights once at that bandwidth\n"
      "floor: a step's least time, max(weights + K/V bytes / bandwidth, flops / peak)\n");
  std::printf("%-34s %5s %10s %12s %10s %12s %13s %9s %9s %9s %9s\n", "composition", "batch",
              "wt MiB", "MiB/token", "steps/s", "tokens/s", "roof tok/s", "of roof", "vs b=1",
              "step ms", "floor ms");
  std::apply([&]<class... F>(F...) { (bench_format<F>(o, t), ...); }, sk::weights::AllFormats{});
  return 0;
}
