// SPDX-License-Identifier: Apache-2.0
// Decode throughput of GPT-2 124M (random weights) on the host backend, batch 1: prefill P
// tokens, then D decode steps. A decode step must read every weight once, so its ceiling is
// read bandwidth / weight bytes; the bandwidth is measured here, in the same run.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <numeric>

#include "common.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/sampling.hpp"

namespace sk = servekit;

#ifdef SERVEKIT_OPENMP_LOOPS
constexpr const char* kLoops = "OpenMP loops";
#else
constexpr const char* kLoops = "servekit pool";
#endif

int main(int argc, char** argv) {
  CLI::App app{"bench_decode_host: GPT-2 124M decode on the host backend"};
  int prefill = 128, decode = 128, threads = 0;
  app.add_option("--prefill", prefill, "prompt tokens");
  app.add_option("--decode", decode, "decode steps");
  app.add_option("--threads", threads, "host threads (default: every CPU)");
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) sk::set_host_threads(threads);

  using Model = sk::Gpt2<sk::Config<sk::dims::Gpt2Small>>;
  std::fprintf(stderr, "measuring read bandwidth ...\n");
  const double bw = sk::bench::read_bandwidth_gbs();
  std::fprintf(stderr, "making random GPT-2 124M ...\n");
  auto model = Model::random(1);
  auto cache = model.make_cache(1, prefill + decode);
  std::vector<int32_t> prompt(prefill);
  for (int i = 0; i < prefill; i++) prompt[i] = (i * 7919) % 50257;
  std::vector<float> logits;

  // Warm-up: one short prefill + decode so first-touch page faults are not timed.
  {
    sk::model::SeqStep s{0, 0, 8};
    model.forward(cache, {std::span(prompt).first(8), std::span(&s, 1)}, logits);
  }
  sk::model::SeqStep s{0, 0, prefill};
  double t0 = sk::bench::now_s();
  model.forward(cache, {prompt, std::span(&s, 1)}, logits);
  const double t_prefill = sk::bench::now_s() - t0;
  int32_t tok = sk::serve::argmax(logits);
  t0 = sk::bench::now_s();
  for (int i = 0; i < decode; i++) {
    sk::model::SeqStep d{0, prefill + i, 1};
    model.forward(cache, {std::span(&tok, 1), std::span(&d, 1)}, logits);
    tok = sk::serve::argmax(logits);
    if ((i + 1) % 32 == 0) std::fprintf(stderr, "  decode %d/%d\n", i + 1, decode);
  }
  const double t_decode = sk::bench::now_s() - t0;

  const double wbytes = static_cast<double>(model.weight_bytes());
  const double tps = decode / t_decode;
  const double roof = bw * 1e9 / wbytes;
  std::printf("composition      %s, batch 1, %d threads (%s)\n", Model::name().c_str(),
              sk::host_threads(), kLoops);
  std::printf("weights          %.1f MiB read per decode step\n", wbytes / (1 << 20));
  std::printf("read bandwidth   %.2f GB/s (measured, this run)\n", bw);
  std::printf("prefill          %d tokens in %.1f ms = %.1f tokens/s\n", prefill, t_prefill * 1e3,
              prefill / t_prefill);
  std::printf("decode           %d steps in %.1f ms = %.2f tokens/s\n", decode, t_decode * 1e3,
              tps);
  std::printf("roofline         %.2f tokens/s (bandwidth / weight bytes); decode at %.0f%% of it\n",
              roof, 100 * tps / roof);
  return 0;
}
