// SPDX-License-Identifier: Apache-2.0
// One host linear at a time: GPT-2 124M's four layer shapes and its lm_head as a (C, V) matrix,
// in fp32, f16 and uint8 codes (per column) and W8A8 (int8 x int8), W in its (K, N) order and
// packed in the host backend's strips, at a few row counts, each timed over enough distinct
// matrices that every call reads W from memory. Prints GB/s of W beside the machine's streaming
// read bandwidth and GFLOP/s beside its multiply-add peak, both measured in the same run: the two
// ceilings a decode step's linears live under (one row: bandwidth; a batch: both).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <vector>

#include "common.hpp"
#include "servekit/core/dtype.hpp"
#include "servekit/kernels/host/linear_i8.hpp"
#include "servekit/kernels/host/lm_head.hpp"
#include "servekit/kernels/host/matmul.hpp"
#include "servekit/kernels/host/packed.hpp"

namespace sk = servekit;
namespace h = servekit::kernels::host;

// Times call(i) over the n_mats matrices (best of 5 passes, per call) and prints a row: W's
// bytes per call against the bandwidth, its multiply-adds against the peak.
template <class Call>
void time_calls(const char* fmt, const char* layout, int M, int K, int N, std::size_t w_bytes,
                int n_mats, double bw, double peak, Call call) {
  const double best = sk::bench::best_seconds(5,
                                              [&] {
                                                for (int i = 0; i < n_mats; i++) call(i);
                                              }) /
                      n_mats;
  const double gbs = w_bytes / best / 1e9, gflops = 2.0 * K * N * M / best / 1e9;
  std::printf("%-4s %-6s %4d %5d %6d %10.1f %8.1f %7.0f%% %9.1f %7.0f%%\n", fmt, layout, M, K, N,
              best * 1e6, gbs, 100 * gbs / bw, gflops, 100 * gflops / peak);
  std::fflush(stdout);
}

template <class T>
void run(const char* fmt, bool packed, int M, int K, int N, double bw, double peak) {
  // Distinct matrices adding up to >= 256 MiB, so that none is in a cache when it is used.
  const std::size_t per = static_cast<std::size_t>(K) * N;
  const int n_mats = static_cast<int>(std::max<std::size_t>(2, (256u << 20) / (per * sizeof(T))));
  std::vector<T> w(per * n_mats);
  for (std::size_t i = 0; i < w.size(); i++) {
    if constexpr (std::is_same_v<T, float>)
      w[i] = 0.001f * static_cast<float>(i & 1023);
    else if constexpr (std::is_same_v<T, std::uint8_t>)
      w[i] = static_cast<std::uint8_t>(i & 255);
    else
      w[i].bits = static_cast<std::uint16_t>(0x1400 + (i & 1023));  // small normal halves
  }
  if (packed) {  // each matrix in the host backend's strips (kernels/host/packed.hpp)
    std::vector<T> p;
    for (int i = 0; i < n_mats; i++) {
      const auto s =
          h::pack_strips(std::vector<T>(w.begin() + per * i, w.begin() + per * (i + 1)), K, N);
      p.insert(p.end(), s.begin(), s.end());
    }
    w = std::move(p);
  }
  const std::size_t stride = w.size() / n_mats;
  std::vector<float> scale(N, 0.01f), zero(N, -1.f), x(static_cast<std::size_t>(M) * K, 0.01f),
      out(static_cast<std::size_t>(M) * N);
  auto view = [&](int i) {
    h::WeightView<T> v{w.data() + stride * i, K, N, K};
    v.packed = packed;
    if constexpr (h::WeightView<T>::grouped)
      v.scale = scale.data(), v.zero = zero.data(), v.state_cols = N;
    return v;
  };
  time_calls(
      fmt, packed ? "packed" : "(K,N)", M, K, N, per * sizeof(T), n_mats, bw, peak,
      [&](int i) { h::matmul<h::Epilogue::Store>(out.data(), x.data(), view(i), nullptr, M); });
}

// W8A8 (kernels/host/linear_i8.hpp): int8 codes packed in quads, x quantised per row in the
// call; its multiply-adds against the int8 dot-product peak.
void run_i8(int M, int K, int N, double bw, double ipeak) {
  const std::size_t per = static_cast<std::size_t>(K) * N;
  const int n_mats = static_cast<int>(std::max<std::size_t>(2, (256u << 20) / per));
  std::vector<std::int8_t> w;
  std::vector<std::int8_t> one(per);
  for (std::size_t i = 0; i < per; i++) one[i] = static_cast<std::int8_t>((i * 7) % 255 - 127);
  for (int i = 0; i < n_mats; i++) {
    const auto p = h::pack_quads(one, K, N);
    w.insert(w.end(), p.begin(), p.end());
  }
  const std::size_t stride = w.size() / n_mats;
  std::vector<float> scale(N, 0.01f), x(static_cast<std::size_t>(M) * K),
      out(static_cast<std::size_t>(M) * N);
  for (std::size_t i = 0; i < x.size(); i++) x[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
  std::vector<std::int32_t> colsum(N, 5);
  time_calls("w8a8", "packed", M, K, N, per, n_mats, bw, ipeak, [&](int i) {
    const h::I8View v{w.data() + stride * i, K, N, K, scale.data(), colsum.data(), N};
    h::linear_i8<h::Epilogue::Store>(out.data(), x.data(), v, nullptr, M, h::DenseAdd{});
  });
}

// The fp32 tied head as the host backend runs it without a copy: wte (V, C) read along C.
void run_tied_head(int M, int C, int V, double bw, double peak) {
  const std::size_t per = static_cast<std::size_t>(V) * C;
  const int n_mats = 2;  // 2 x 154 MB: neither is in a cache when it is used
  std::vector<float> w(per * n_mats), x(static_cast<std::size_t>(M) * C, 0.01f),
      out(static_cast<std::size_t>(M) * V);
  for (std::size_t i = 0; i < w.size(); i++) w[i] = 0.001f * static_cast<float>(i & 1023);
  time_calls("f32", "(V,C)", M, C, V, per * sizeof(float), n_mats, bw, peak,
             [&](int i) { h::lm_head(out.data(), x.data(), w.data() + per * i, M, V, C); });
}

int main(int argc, char** argv) {
  CLI::App app{"bench_host_linear: GPT-2 124M's linears on the host, one at a time"};
  std::vector<int> rows{1, 4, 8, 16};
  bool head_only = false;
  app.add_option("--rows", rows, "row counts (batch sizes) to time");
  app.add_flag("--head", head_only, "only the fp32 lm_head: wte (V, C) as tied, and (C, V) packed");
  CLI11_PARSE(app, argc, argv);
  std::fprintf(stderr, "measuring read bandwidth and the multiply-add peak ...\n");
  const double bw = sk::bench::read_bandwidth_gbs(), peak = sk::bench::fma_gflops();
  const double ipeak = sk::bench::int8_gops();
  std::printf(
      "host, %d threads: read bandwidth %.1f GB/s, fp32 FMA peak %.0f GFLOP/s, int8 (%s) "
      "peak %.0f GOP/s (this run; w8a8 rows: of the int8 peak)\n",
      sk::host_threads(), bw, peak, h::kI8Isa, ipeak);
  std::printf("%-4s %-6s %4s %5s %6s %10s %8s %8s %9s %8s\n", "fmt", "W", "M", "K", "N", "us/call",
              "GB/s", "of bw", "GFLOP/s", "of peak");
  const int shapes[][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}, {768, 50257}};
  for (int M : rows) {
    run_tied_head(M, 768, 50257, bw, peak);
    if (head_only) {
      run<float>("f32", true, M, 768, 50257, bw, peak);
      continue;
    }
    for (auto [K, N] : shapes) {
      for (bool packed : {false, true}) {
        run<float>("f32", packed, M, K, N, bw, peak);
        run<sk::half_t>("f16", packed, M, K, N, bw, peak);
        run<std::uint8_t>("u8", packed, M, K, N, bw, peak);
      }
      run_i8(M, K, N, bw, ipeak);
    }
  }
  return 0;
}
