// SPDX-License-Identifier: Apache-2.0
// GPT-2 124M (random weights) decode on the Cuda backend in every weight format (W8A8 per
// channel too), at batches 1, 8 and 64 (--batches): ms per step and tokens/s, run eagerly and
// replayed from CUDA graphs, beside the roofline. A decode step must read every weight once and
// the KV rows its sequences attend to; at the GPU's read bandwidth, measured in the same run by
// a streaming-read kernel, that is the fastest the step can be. Before each batch's decode, the
// prefill of its prompts in one step (mode "prefill": ms and prompt tokens/s, eager).
// scripts/gpu_check.sh runs it on a machine with a GPU.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "common.hpp"
#include "device_peaks.cuh"
#include "servekit/backend/cuda.hpp"
#include "servekit/backend/cuda_device.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/model/random_gpt2.hpp"

namespace sk = servekit;
namespace simt = servekit::simt;
using D = sk::dims::Gpt2Small;

struct Opts {
  int prefill = 128, decode = 64, prefill_reps = 3;
  std::vector<int> batches{1, 8, 64};
  std::string only, csv;
  double bw = 0;          // GB/s
  int tiles = 0;          // column tiles a decode linear's block takes; 0: the launchers choose
  bool no_split = false;  // the linears walk every K part in one block
};

template <class F>
void bench_format(const Opts& o, const sk::model::Gpt2Tensors& t, std::FILE* csv) {
  using Model = sk::Gpt2<sk::Config<D, F, sk::kv::Paged<16>, sk::lora::None, sk::backend::Cuda>>;
  if (Model::name().find(o.only) == std::string::npos) return;
  std::fprintf(stderr, "%s: uploading ...\n", Model::name().c_str());
  Model model(t);
  const double wbytes = static_cast<double>(model.weight_bytes());
  constexpr int L = D::n_layer, C = D::n_embd;
  for (int B : o.batches) {
    const int warm = 3, rows = o.prefill + 2 * (warm + o.decode) + 1;
    auto cache = model.make_cache(B, rows);
    model.reserve(B * o.prefill, B, rows);
    std::vector<int32_t> tokens;
    std::vector<sk::model::SeqStep> seqs;
    for (int b = 0; b < B; b++) {
      for (int i = 0; i < o.prefill; i++) tokens.push_back((b * 131 + i * 7919) % D::vocab);
      seqs.push_back({b, 0, o.prefill});
    }
    std::vector<sk::kernels::RowSampling> samp(B);  // greedy
    std::vector<int32_t> ids(B);
    std::vector<float> lp(B);
    auto step = [&] {
      model.forward_pick(cache, {tokens, seqs}, samp, ids, lp);
      tokens.assign(ids.begin(), ids.end());
      for (auto& s : seqs) s = {s.slot, s.n_past + s.n_new, 1};
    };
    // The prefill of all B prompts in one step, timed over repeats that write the same rows.
    if (o.prefill_reps > 0) {
      const sk::model::Batch prompts{tokens, seqs};
      model.forward_pick(cache, prompts, samp, ids, lp);  // warm; the pick waits for the step
      const double t0 = sk::bench::now_s();
      for (int r = 0; r < o.prefill_reps; r++) model.forward_pick(cache, prompts, samp, ids, lp);
      const double ms = (sk::bench::now_s() - t0) * 1e3 / o.prefill_reps;
      const double kv = static_cast<double>(B) * o.prefill * L * 2 * C * sizeof(float);
      std::printf("%-34s %6s %5d %9.1f %9.1f %9.3f %11.1f %9s %9s\n", Model::name().c_str(),
                  "prefill", B, wbytes / 1048576.0, kv / 1048576.0, ms, B * o.prefill * 1e3 / ms,
                  "-", "-");
      std::fflush(stdout);
      if (csv)
        std::fprintf(csv, "%s,prefill,%d,%.0f,%.0f,%.4f,%.2f,0,%.1f\n", Model::name().c_str(), B,
                     wbytes, kv, ms, B * o.prefill * 1e3 / ms, o.bw);
    }
    step();  // prefill
    for (const bool graphs : {false, true}) {
      std::fprintf(stderr, "%s: batch %d, %s ...\n", Model::name().c_str(), B,
                   graphs ? "graphs" : "eager");
      model.set_graphs(graphs);
      for (int i = 0; i < warm; i++) step();
      const int ctx0 = seqs[0].n_past;
      const double t0 = sk::bench::now_s();
      for (int i = 0; i < o.decode; i++) step();
      const double ms = (sk::bench::now_s() - t0) * 1e3 / o.decode;
      // KV rows read per step: each sequence attends to its context (the mean over the run).
      const double ctx = ctx0 + 0.5 * o.decode;
      const double kv = static_cast<double>(B) * ctx * L * 2 * C * sizeof(float);
      const double must = wbytes + kv;
      const double roof_ms = must / (o.bw * 1e9) * 1e3;
      std::printf("%-34s %6s %5d %9.1f %9.1f %9.3f %11.1f %9.3f %8.0f%%\n", Model::name().c_str(),
                  graphs ? "graph" : "eager", B, wbytes / 1048576.0, kv / 1048576.0, ms,
                  B * 1e3 / ms, roof_ms, 100 * roof_ms / ms);
      std::fflush(stdout);
      if (csv)
        std::fprintf(csv, "%s,%s,%d,%.0f,%.0f,%.4f,%.2f,%.4f,%.1f\n", Model::name().c_str(),
                     graphs ? "graph" : "eager", B, wbytes, kv, ms, B * 1e3 / ms, roof_ms, o.bw);
    }
  }
}

int run(int argc, char** argv) {
  CLI::App app{"bench_decode_cuda: GPT-2 124M decode per weight format on the Cuda backend"};
  Opts o;
  app.add_option("--prefill", o.prefill, "prompt tokens per sequence");
  app.add_option("--decode", o.decode, "timed decode steps");
  app.add_option("--prefill-reps", o.prefill_reps, "timed prefill steps per batch (0: none)");
  app.add_option("--batches", o.batches, "decode batch sizes");
  app.add_option("--only", o.only, "only the compositions whose name contains this, e.g. f16");
  app.add_option("--csv", o.csv, "also write the rows to this CSV file");
  app.add_option("--tiles-per-block", o.tiles,
                 "column tiles a decode linear's block takes (0: the launchers choose)")
      ->check(CLI::Range(0, 8));
  app.add_flag("--no-split-k", o.no_split,
               "the linears ignore the split-K scratch (one block walks every K part)");
  CLI11_PARSE(app, argc, argv);
  if (const std::string why = sk::backend::cuda_device_missing(); !why.empty()) {
    std::fprintf(stderr, "bench_decode_cuda: no CUDA device (%s); nothing run\n", why.c_str());
    return sk::backend::kNoCudaDeviceExit;
  }
  const sk::kernels::ForceTilesPerBlock force(o.tiles);
  const sk::kernels::ForceNoSplitK no_split(o.no_split);
  int dev = 0;
  cudaDeviceProp prop{};
  simt::check(cudaGetDevice(&dev), "cudaGetDevice");
  simt::check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
  std::fprintf(stderr, "measuring the device's read bandwidth ...\n");
  o.bw = sk::bench::device_read_gbs();
  std::printf("%s, %d SMs; streaming read %.0f GB/s (measured, this run)\n", prop.name,
              prop.multiProcessorCount, o.bw);
  std::printf(
      "roof ms: every weight and the attended KV rows read once at that bandwidth; prefill rows:"
      " B prompts of %d tokens in one step, tokens/s of prompt\n",
      o.prefill);
  std::printf("%-34s %6s %5s %9s %9s %9s %11s %9s %9s\n", "composition", "mode", "batch", "wt MiB",
              "KV MiB", "ms/step", "tokens/s", "roof ms", "of roof");
  std::FILE* csv = sk::bench::open_csv(
      o.csv, "composition,mode,batch,weight_bytes,kv_bytes,ms,tokens_s,roof_ms,read_gbs\n");
  std::fprintf(stderr, "making random GPT-2 124M ...\n");
  const auto t = sk::model::random_gpt2<D>(1);
  bench_format<sk::weights::F32>(o, t, csv);
  bench_format<sk::weights::F16>(o, t, csv);
  bench_format<sk::weights::BF16>(o, t, csv);
  bench_format<sk::weights::U8ZeroPoint<sk::weights::PerChannel>>(o, t, csv);
  bench_format<sk::weights::W8A8<sk::weights::PerChannel>>(o, t, csv);
  if (csv) std::fclose(csv);
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // no GPU, a driver too old, out of memory: say which
    std::fprintf(stderr, "bench_decode_cuda: error: %s\n", e.what());
    return 1;
  }
}
