// SPDX-License-Identifier: Apache-2.0
#pragma once
// Benchmark helpers: the machine's measured read bandwidth and multiply-add rate (the roofline
// every host figure is compared with), a wall clock, percentiles, random prompts and plots.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "servekit/kernels/host/i8_isa.hpp"  // the int8 instruction the W8A8 tiles use
#include "servekit/kernels/host/simd.hpp"

namespace servekit::bench {

// The p-th percentile (0..100) of v, by the nearest rank; 0 for no values.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p / 100 * v.size()))];
}

// len random token ids below 50000 (GPT-2's vocabulary): prompts that share nothing.
inline std::vector<int32_t> random_tokens(std::mt19937_64& rng, int len) {
  std::vector<int32_t> p(len);
  for (auto& t : p) t = static_cast<int32_t>(rng() % 50000);
  return p;
}

// Writes a gnuplot script and runs it; a missing or failing gnuplot only costs the PNG.
inline void plot(const std::filesystem::path& gp, const std::string& script) {
  std::ofstream(gp) << script;
  if (std::system(("gnuplot '" + gp.string() + "' 2>/dev/null").c_str()) != 0)
    std::fprintf(stderr, "(gnuplot failed or missing: no PNG for %s)\n", gp.c_str());
}

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The fastest of reps runs of f, in seconds: on a shared machine a neighbour's burst slows some
// runs, never speeds one up.
template <class F>
double best_seconds(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    const double t0 = now_s();
    f();
    best = std::min(best, now_s() - t0);
  }
  return best;
}

// Best-of-n streaming read of a buffer much larger than the caches, all threads: GB/s.
inline double read_bandwidth_gbs(std::size_t bytes = std::size_t(1) << 30, int reps = 5) {
  std::vector<float> buf(bytes / sizeof(float));
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < buf.size(); i++) buf[i] = static_cast<float>(i & 1023);
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < reps; r++) {
    const double t0 = now_s();
    float total = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : total)
    for (std::size_t i = 0; i < buf.size(); i++) total += buf[i];
    const double dt = now_s() - t0;
    sink = sink + total;
    best = std::max(best, bytes / dt / 1e9);
  }
  return best;
}

// The best of reps runs of body() on every OpenMP thread at once, as G ops/s: each call of body
// does ops operations and returns a value that keeps them from being optimised away.
template <class Body>
double threads_peak(int reps, double ops, Body body) {
  double best = 0;
  volatile double sink = 0;
  for (int r = 0; r < reps; r++) {
    int threads = 1;
    const double t0 = now_s();
#pragma omp parallel
    {
#pragma omp single
      threads = omp_get_num_threads();
      const double v = body();
#pragma omp critical
      sink = sink + v;
    }
    best = std::max(best, ops * threads / (now_s() - t0) / 1e9);
  }
  return best;
}

// Peak fp32 multiply-add rate of this machine's cores, GFLOP/s (2 per FMA), best of reps: each
// thread runs 12 independent chains of the host kernels' own vector FMA (12 fit AVX2's 16
// registers as well as AVX-512's 32), long enough that the chains' latency is hidden.
inline double fma_gflops(int reps = 5) {
  namespace h = servekit::kernels::host;
  constexpr int kChains = 12;
  constexpr long kIters = 20'000'000;
  return threads_peak(reps, 2.0 * h::kLanes * kChains * kIters, [] {
    h::vec acc[kChains];
    for (int c = 0; c < kChains; c++) acc[c] = h::vec{} + 0.001f * c;
    const h::vec a = h::vec{} + 0.999999f, b = h::vec{} + 1e-7f;
    for (long i = 0; i < kIters; i++)
      for (int c = 0; c < kChains; c++) acc[c] = h::madd(acc[c], a, b);
    float s = 0;
    for (int c = 0; c < kChains; c++) s += h::lane_sum(acc[c]);
    return double(s);
  });
}

// GCC 12 reports _mm512_reduce_add_epi32's undefined start value as uninitialised (bug 105593,
// as in kernels/host/linear_i8.hpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// Peak int8 multiply-add rate of the instruction W8A8's host kernels use
// (kernels/host/i8_isa.hpp: vpdpbusd on zmm with AVX-512 VNNI, on ymm with AVX-VNNI; with AVX2,
// vpsignb + vpmaddubsw + vpmaddwd + vpaddd, in the tile's shape: 4 rows' codes against 2
// weight vectors that change every step), in GOP/s (2 per multiply-add, as GFLOP/s), 12
// independent chains per thread (8 for AVX2's shape); 0 where those kernels use plain integer
// loops.
inline double int8_gops(int reps = 5) {
  constexpr int kChains = 12;
  constexpr long kIters = 20'000'000;
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  return threads_peak(reps, 2.0 * 64 * kChains * kIters, [] {  // 64 products an instruction
    __m512i acc[kChains];
    for (int c = 0; c < kChains; c++) acc[c] = _mm512_set1_epi32(c);
    const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
    for (long i = 0; i < kIters; i++)
      for (int c = 0; c < kChains; c++) acc[c] = _mm512_dpbusd_epi32(acc[c], a, b);
    int s = 0;
    for (int c = 0; c < kChains; c++) s += _mm512_reduce_add_epi32(acc[c]);
    return double(s);
  });
#elif defined(SERVEKIT_I8_YMM_VNNI)  // AVX-VNNI (or its EVEX twin): vpdpbusd on ymm
  return threads_peak(reps, 2.0 * 32 * kChains * kIters, [] {  // 32 products an instruction
    __m256i acc[kChains];
    for (int c = 0; c < kChains; c++) acc[c] = _mm256_set1_epi32(c);
    const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
    for (long i = 0; i < kIters; i++)
      for (int c = 0; c < kChains; c++) acc[c] = servekit::kernels::host::dot4_ymm(acc[c], a, b);
    int s = 0;
    for (int c = 0; c < kChains; c++) s += _mm256_extract_epi32(acc[c], 0);
    return double(s);
  });
#elif defined(SERVEKIT_I8_YMM_SIGNED)
  (void)kChains;                                         // the tile's 4 rows x 2 halves instead
  return threads_peak(reps, 2.0 * 32 * 8 * kIters, [] {  // 32 products a dot4_ymm
    __m256i acc[4][2], x[4], xa[4];
    for (int r = 0; r < 4; r++) {
      x[r] = _mm256_set1_epi8(static_cast<char>(2 * r - 3));
      xa[r] = _mm256_abs_epi8(x[r]);  // stored beside the codes, as the tile reads them
      acc[r][0] = acc[r][1] = _mm256_set1_epi32(r);
    }
    __m256i w[2] = {_mm256_set1_epi8(-2), _mm256_set1_epi8(5)};
    const __m256i step = _mm256_set1_epi8(1);
    for (long i = 0; i < kIters; i++) {
      w[0] = _mm256_add_epi8(w[0], step), w[1] = _mm256_add_epi8(w[1], step);  // as a load
      for (int r = 0; r < 4; r++)
        for (int h = 0; h < 2; h++)
          acc[r][h] = servekit::kernels::host::dot4_ymm(acc[r][h], xa[r], x[r], w[h]);
    }
    int s = 0;
    for (int r = 0; r < 4; r++)
      s += _mm256_extract_epi32(acc[r][0], 0) + _mm256_extract_epi32(acc[r][1], 0);
    return double(s);
  });
#else
  (void)reps, (void)kChains, (void)kIters;
  return 0;
#endif
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// The --csv file of a benchmark with its header written, or nullptr when path is empty; a file
// that cannot be written ends the program with a message naming it.
inline std::FILE* open_csv(const std::string& path, const char* header) {
  if (path.empty()) return nullptr;
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "error: cannot write %s\n", path.c_str());
    std::exit(1);
  }
  std::fputs(header, f);
  return f;
}

}  // namespace servekit::bench
