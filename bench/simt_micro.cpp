// SPDX-License-Identifier: Apache-2.0
// What the emulator's primitives cost on this CPU: a raw fiber switch, __syncthreads, a
// shuffle, an empty launch, and a tiled SGEMM. Each number is the best of several repeats after
// a warm-up run.
//   simt_micro [--workers N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "servekit/simt/simt.hpp"

namespace simt = servekit::simt;
namespace ctx = boost::context::detail;

namespace {

// Best wall time of `reps` runs of f (after one warm-up), in seconds.
double best_seconds(int reps, const std::function<void()>& f) {
  f();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// Two fcontexts bouncing: the floor under every barrier and shuffle.
void ping(ctx::transfer_t t) {
  for (;;) t = ctx::jump_fcontext(t.fctx, nullptr);
}

__global__ void barriers(int rounds) {
  for (int r = 0; r < rounds; ++r) __syncthreads();
}

__global__ void shuffles(int rounds, int* out) {
  int v = threadIdx.x;
  for (int r = 0; r < rounds; ++r) v += __shfl_xor_sync(0xffffffffu, v, 1 + r % 31);
  if (v == 42) *out = v;
}

__global__ void empty_kernel() {}

// C (M, N) = A (M, K) @ B (K, N), row-major, kTile x kTile tiles in shared memory. On the
// emulator the cost is mostly barrier arrivals: 2 per thread per tile of K, so a larger tile
// does more multiply-adds per arrival.
template <int kTile>
__global__ void sgemm_tiled(const float* a, const float* b, float* c, int m, int n, int k) {
  __shared__ float as[kTile][kTile];
  __shared__ float bs[kTile][kTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * kTile + ty, col = blockIdx.x * kTile + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < k; k0 += kTile) {
    as[ty][tx] = row < m && k0 + tx < k ? a[row * k + k0 + tx] : 0.0f;
    bs[ty][tx] = col < n && k0 + ty < k ? b[(k0 + ty) * n + col] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTile; ++kk) acc += as[ty][kk] * bs[kk][tx];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = acc;
}

}  // namespace

int main(int argc, char** argv) {
  int workers = 0;
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--workers")) workers = std::atoi(argv[i + 1]);
  simt::set_host_workers(workers);

  {
    std::vector<char> stack(64 * 1024);
    ctx::fcontext_t other = ctx::make_fcontext(stack.data() + stack.size(), stack.size(), ping);
    const int n = 10'000'000;
    const double s = best_seconds(3, [&] {
      for (int i = 0; i < n; ++i) other = ctx::jump_fcontext(other, nullptr).fctx;
    });
    std::printf("fiber switch (fcontext, one way)      %8.2f ns\n", s / (2.0 * n) * 1e9);
  }
  {
    const int rounds = 20000;
    const double s = best_seconds(
        5, [&] { simt::launch(simt::kernel<barriers>, dim3(1), dim3(256), 0, nullptr, rounds); });
    std::printf("__syncthreads, 256 threads            %8.0f k barriers/s (%.2f ns per arrival)\n",
                rounds / s / 1e3, s / (rounds * 256.0) * 1e9);
  }
  {
    const int rounds = 20000;
    simt::DeviceBuffer<int> out(1);
    const double s = best_seconds(5, [&] {
      simt::launch(simt::kernel<shuffles>, dim3(1), dim3(32), 0, nullptr, rounds, out.data());
    });
    std::printf("__shfl_xor_sync, 32 lanes             %8.2f ns per lane\n",
                s / (rounds * 32.0) * 1e9);
  }
  for (int threads : {32, 1024}) {
    const int n = threads == 32 ? 20000 : 2000;
    const double s = best_seconds(5, [&] {
      for (int i = 0; i < n; ++i)
        simt::launch(simt::kernel<empty_kernel>, dim3(1), dim3(threads), 0, nullptr);
    });
    std::printf("empty launch, 1 block of %4d         %8.2f us\n", threads, s / n * 1e6);
  }
  for (int tile : {16, 32}) {
    const int n = 256;
    std::vector<float> a(n * n), b(n * n), c(n * n);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (auto& v : a) v = dist(rng);
    for (auto& v : b) v = dist(rng);
    simt::DeviceBuffer<float> da{std::span<const float>(a)}, db{std::span<const float>(b)},
        dc(n * n);
    const double s = best_seconds(5, [&] {
      if (tile == 16)
        simt::launch(simt::kernel<sgemm_tiled<16>>, dim3(n / 16, n / 16), dim3(16, 16), 0, nullptr,
                     da.data(), db.data(), dc.data(), n, n, n);
      else
        simt::launch(simt::kernel<sgemm_tiled<32>>, dim3(n / 32, n / 32), dim3(32, 32), 0, nullptr,
                     da.data(), db.data(), dc.data(), n, n, n);
    });
    dc.download(c);
    double max_err = 0;
    for (int i = 0; i < n; i += 17)
      for (int j = 0; j < n; j += 13) {
        double ref = 0;
        for (int p = 0; p < n; ++p) ref += double(a[i * n + p]) * b[p * n + j];
        max_err = std::max(max_err, std::abs(ref - c[i * n + j]));
      }
    std::printf("tiled SGEMM 256^3, %dx%d blocks       %8.2f ms (%.2f GFLOP/s, max err %.1e)\n",
                tile, tile, s * 1e3, 2.0 * n * n * n / s / 1e9, max_err);
  }
  return 0;
}
