// SPDX-License-Identifier: Apache-2.0
// Where a LoRA step's milliseconds go on the host: the 48 linears of a GPT-2 small decode step
// (c_attn, attn c_proj, c_fc, mlp c_proj; 12 layers, each its own weights and adapters, so that
// both come from memory as in a step) at one batch, three ways, in turns within each rep:
//   base     the linears alone (f32, packed)
//   shrink   the linears after the LoRA shrink of every adapted row (v = scale A x)
//   fused    the linears with the delta fused (linear_lora: the shrink, then the expand in
//            the linear's epilogue), as the model runs them
//   unfused  the deltas into a zeroed (N, Nout) matrix (lora_gathered / lora_segmented),
//            which the linear adds
// The shrink's and the expand's costs (shrink - base, fused - shrink) are printed beside their
// bytes (A, and B^T packed) at the read bandwidth measured in the same run: the gap between
// the two is what bench_lora's step over its floor is made of. Beside the shrink alone, the
// same reads without its arithmetic: each task of shrink_rows summing its adapters' A (read
// once where its two rows share one), the rate this access pattern reads at, 48 linears of a
// few MB each between barriers, and the same bytes summed as one long stream a thread (the
// probe's pattern, timed in the same reps: the probe itself is a best of five). Gathered dispatch
// (rows in batch order) or segmented (--dispatch segmented: grouped by adapter); row i on adapter i
// (--shares 0) or i % k.
// --kernels: the two kernels alone instead, on one thread, as a task's rows meet them (128, or
// --batch; one adapter, or row i on adapter i % --shares): the shrink of the rows (shrink_rows)
// and their expand as the fused linear's epilogue asks for it (LoraAdd::rows, 4 rows x a
// 256-column panel a call), per linear shape, in GFLOP/s beside one thread's FMA peak measured
// in the same run.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "servekit/kernels/host/lora.hpp"
#include "servekit/weights/f32.hpp"

namespace k = servekit::kernels;
namespace kh = servekit::kernels::host;
namespace w = servekit::weights;

// Rows' adapter slots (every row has one) and the groups the adapter registry makes of them
// for segmented: the rows stably sorted by slot, each group's start and slot.
struct Segments {
  std::vector<int32_t> ad, order, seg_start, seg_ad;
  explicit Segments(std::vector<int32_t> slots) : ad(std::move(slots)), order(ad.size()) {
    const int n = static_cast<int>(ad.size());
    for (int i = 0; i < n; i++) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return ad[a] < ad[b]; });
    for (int i = 0; i < n; i++)
      if (i == 0 || ad[order[i]] != ad[order[i - 1]])
        seg_start.push_back(i), seg_ad.push_back(ad[order[i]]);
    seg_start.push_back(n);
  }
  void into(k::LoraParams& p) const {
    p.ad = ad.data(), p.order = order.data(), p.seg_start = seg_start.data();
    p.seg_ad = seg_ad.data(), p.n_seg = static_cast<int>(seg_ad.size());
  }
};

// a[0 .. len) summed in four vector chains: a read with no arithmetic to wait on.
float sum_span(const float* a, int64_t len) {
  using kh::vec, kh::kLanes;
  vec s0{}, s1{}, s2{}, s3{};
  int64_t d = 0;
  for (; d + 4 * kLanes <= len; d += 4 * kLanes) {
    s0 += kh::load(a + d), s1 += kh::load(a + d + kLanes);
    s2 += kh::load(a + d + 2 * kLanes), s3 += kh::load(a + d + 3 * kLanes);
  }
  float t = kh::lane_sum(s0 + s1 + s2 + s3);
  for (; d < len; d++) t += a[d];
  return t;
}

// shrink_rows' tasks (rows in pairs), each reading its rows' A as a plain sum: what the shrink
// reads, in its order, without its FMAs. The sums land in v so that the reads stay.
void sum_a(const k::LoraParams& p, const int32_t* rows, int n) {
  auto sum = [&](int r) {
    const k::LoraMats& m = p.tab[p.ad[r]];
    p.v[static_cast<int64_t>(r) * p.max_rank] = sum_span(m.a, int64_t{m.rank} * p.K);
  };
  servekit::parallel_for((n + 1) / 2, [&](int i) {
    const int r = rows[2 * i];
    sum(r);
    if (2 * i + 1 < n && p.ad[rows[2 * i + 1]] != p.ad[r]) sum(rows[2 * i + 1]);
  });
}

// --kernels (above), each kernel's best of reps (bench::best_seconds). N rows, row i on
// adapter i % n_ad; segmented: the shrink and the expand take them grouped by adapter (the
// expand in the order the fused linear stores them, store_order).
void kernels(int rank, int reps, int N, int n_ad, bool segmented) {
  servekit::set_host_threads(1);
  std::printf("measuring one thread's FMA peak...\n");
  const double peak = servekit::bench::fma_gflops() / omp_get_max_threads();
  std::mt19937_64 rng(11);
  std::normal_distribution<float> g(0.f, 0.02f);
  std::printf(
      "rows %d on %d adapter(s) (row i on i %% %d), %s, rank %d, one thread; FMA peak %.1f "
      "GFLOP/s (this run)\n",
      N, n_ad, n_ad, segmented ? "segmented" : "gathered", rank, peak);
  std::printf("%6s %6s %14s %9s %14s %9s\n", "K", "Nout", "shrink GFLOP/s", "of peak",
              "expand GFLOP/s", "of peak");
  const int shapes[4][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
  float sink = 0;
  for (const auto& sh : shapes) {
    const int K = sh[0], Nout = sh[1];
    std::vector<float> x(static_cast<std::size_t>(N) * K), v(static_cast<std::size_t>(N) * rank);
    for (auto& f : x) f = g(rng);
    std::vector<std::vector<float>> a(n_ad), bt(n_ad);
    std::vector<k::LoraMats> tab(n_ad);
    for (int i = 0; i < n_ad; i++) {
      a[i].resize(static_cast<std::size_t>(rank) * K);
      std::vector<float> b(static_cast<std::size_t>(Nout) * rank);
      for (auto& f : a[i]) f = g(rng);
      for (auto& f : b) f = g(rng);
      bt[i] = k::pack_bt(b.data(), Nout, rank);
      tab[i].a = a[i].data(), tab[i].rank = rank, tab[i].scale = 2.f, tab[i].bt = bt[i].data();
    }
    std::vector<int32_t> slots(N);
    for (int i = 0; i < N; i++) slots[i] = i % n_ad;
    const Segments seg(std::move(slots));
    k::LoraParams p{};
    p.x = x.data(), p.tab = tab.data(), p.n_slots = n_ad, p.v = v.data();
    p.N = N, p.K = K, p.Nout = Nout, p.max_rank = rank;
    seg.into(p);
    const std::vector<int32_t> rows = kh::lora_detail::adapted_rows(p, segmented);
    std::vector<float> scratch(static_cast<std::size_t>(kh::kAddRows) * 256);
    using servekit::bench::best_seconds;
    const double ts = best_seconds(reps, [&] { kh::lora_detail::shrink_rows(p, rows.data(), N); });
    const kh::LoraAdd add{&p, segmented};
    const double te = best_seconds(reps, [&] {
      const int32_t* idx = kh::store_order(add, 0, N);
      for (int n0 = 0; n0 < Nout; n0 += 256)
        for (int r0 = 0; r0 < N; r0 += kh::kAddRows) {
          const int n = std::min(kh::kAddRows, N - r0);
          const float* out[kh::kAddRows];
          add.rows(idx + r0, n, std::min(2 * kh::kAddRows, N - r0 - n), n0,
                   std::min(256, Nout - n0), scratch.data(), out);
          sink += out[0][0];
        }
    });
    const double gs = 2.0 * N * K * rank / ts * 1e-9, ge = 2.0 * N * Nout * rank / te * 1e-9;
    std::printf("%6d %6d %14.1f %8.0f%% %14.1f %8.0f%%\n", K, Nout, gs, 100 * gs / peak, ge,
                100 * ge / peak);
  }
  if (sink == 12345.f) std::printf(" ");  // keeps the expand's results live
}

struct Linear {
  int K, N;
  kh::Packed<w::Matrix<w::F32>> W;
  std::vector<float> b;
  std::vector<std::vector<float>> a, bt;  // per adapter: A (rank, K), B^T packed
  std::vector<k::LoraMats> tab;
};

int main(int argc, char** argv) {
  CLI::App app{"the LoRA shrink and expand of a decode step's linears, beside their bytes"};
  int batch = 64, shares = 0, reps = 15;
  std::string ranks = "mixed";
  app.add_option("--batch", batch, "rows")->check(CLI::Range(1, 1024));
  app.add_option("--shares", shares, "0: row i on adapter i; k: row i on adapter i % k")
      ->check(CLI::Range(0, 1024));
  app.add_option("--ranks", ranks, "mixed (4..16 at random) or a fixed rank (1..64)");
  app.add_option("--reps", reps, "timed reps (the median is kept)")->check(CLI::Range(1, 1000));
  std::string dispatch = "gathered";
  app.add_option("--dispatch", dispatch, "gathered (rows in batch order) or segmented")
      ->check(CLI::IsMember({"gathered", "segmented"}));
  bool kernel_only = false;
  app.add_flag("--kernels", kernel_only,
               "the shrink and expand kernels alone, one thread, 128 rows (or --batch) of one "
               "adapter (or row i on adapter i % --shares), rank --ranks (16 if mixed), best of "
               "20 x --reps, beside the FMA peak");
  CLI11_PARSE(app, argc, argv);
  if (ranks != "mixed" && (ranks.find_first_not_of("0123456789") != std::string::npos ||
                           ranks.empty() || std::stoi(ranks) < 1 || std::stoi(ranks) > 64)) {
    std::fprintf(stderr, "--ranks: '%s' is neither mixed nor a rank in 1..64\n", ranks.c_str());
    return 2;
  }
  if (kernel_only) {
    kernels(ranks == "mixed" ? 16 : std::stoi(ranks), 20 * reps, app.count("--batch") ? batch : 128,
            std::max(shares, 1), dispatch == "segmented");
    return 0;
  }
  const int n_adapters = shares == 0 ? batch : std::min(shares, batch);
  std::printf("measuring read bandwidth...\n");
  const double gbs = servekit::bench::read_bandwidth_gbs();
  std::printf("building 12 layers' linears and %d adapters each (random)...\n", n_adapters);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> g(0.f, 0.02f);
  const int shapes[4][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
  std::vector<Linear> lin;
  double a_bytes = 0, bt_bytes = 0;
  for (int layer = 0; layer < 12; layer++)
    for (const auto& s : shapes) {
      Linear l{s[0], s[1], {}, std::vector<float>(s[1], 0.01f), {}, {}, {}};
      std::vector<float> wf(static_cast<std::size_t>(l.K) * l.N);
      for (auto& v : wf) v = g(rng);
      l.W = kh::Packed<w::Matrix<w::F32>>::pack(w::Matrix<w::F32>{std::move(wf), l.K, l.N});
      for (int i = 0; i < n_adapters; i++) {
        const int r = ranks == "mixed" ? 4 + static_cast<int>(rng() % 13) : std::stoi(ranks);
        std::vector<float> a(static_cast<std::size_t>(r) * l.K),
            b(static_cast<std::size_t>(l.N) * r);
        for (auto& v : a) v = g(rng);
        for (auto& v : b) v = g(rng);
        l.bt.push_back(k::pack_bt(b.data(), l.N, r));
        l.a.push_back(std::move(a));
        a_bytes += l.a.back().size() * sizeof(float);
        bt_bytes += l.bt.back().size() * sizeof(float);
      }
      for (int i = 0; i < n_adapters; i++) {
        k::LoraMats m;
        m.a = l.a[i].data();
        m.rank = static_cast<int>(l.a[i].size()) / l.K;
        m.scale = 2.f;
        m.bt = l.bt[i].data();
        // m.b stays null: the host kernels read bt only, and no reference runs here.
        l.tab.push_back(m);
      }
      lin.push_back(std::move(l));
    }
  std::vector<float> x(static_cast<std::size_t>(batch) * 3072), out(x.size());
  std::vector<float> v(static_cast<std::size_t>(batch) * 64);
  std::vector<float> delta(static_cast<std::size_t>(batch) * 3072);
  for (auto& e : x) e = g(rng);
  std::vector<int32_t> slots(batch);
  for (int i = 0; i < batch; i++) slots[i] = shares == 0 ? i : i % shares;
  const Segments seg(std::move(slots));
  const bool segmented = dispatch == "segmented";
  using E = k::Epilogue;
  // A's bytes again in one buffer, each thread summing one contiguous share of it: the probe's
  // pattern (one long stream a thread, no barrier) on the same bytes.
  std::vector<float> stream(static_cast<std::size_t>(a_bytes / sizeof(float)), 0.5f);
  // 0 base, 1 shrink then base, 2 fused, 3 the shrink alone, 4 unfused, 5 A summed, 6 A's bytes
  // as one stream a thread
  constexpr int kRuns = 7;
  auto run = [&](int how) {
    const double t0 = servekit::bench::now_s();
    if (how == 6) {
      const int T = servekit::host_threads();
      const int64_t share = static_cast<int64_t>(stream.size()) / T;
      servekit::parallel_for(
          T, [&](int i) { v[i] = sum_span(stream.data() + i * share, share); }, 1);
      return (servekit::bench::now_s() - t0) * 1e3;
    }
    for (auto& l : lin) {
      k::LoraParams p{};
      p.x = x.data(), p.tab = l.tab.data(), p.n_slots = n_adapters;
      p.v = v.data(), p.N = batch, p.K = l.K, p.Nout = l.N, p.max_rank = 64;
      seg.into(p);
      if (how == 4) {  // unfused: the deltas into a zeroed (N, Nout) matrix the linear adds
        std::fill(delta.begin(), delta.begin() + static_cast<std::ptrdiff_t>(batch) * l.N, 0.f);
        p.y = delta.data();
        if (segmented)
          kh::lora_segmented(p);
        else
          kh::lora_gathered(p);
        kh::linear<E::Store>(out.data(), x.data(), l.W, l.b.data(), batch, delta.data());
        continue;
      }
      if (how == 2) {
        kh::linear_lora<E::Store>(out.data(), x.data(), l.W, l.b.data(), batch, p, segmented);
        continue;
      }
      if (how == 5) {
        const auto& rows = kh::lora_detail::adapted_rows(p, segmented);
        sum_a(p, rows.data(), static_cast<int>(rows.size()));
        continue;
      }
      if (how == 1 || how == 3) {
        const auto& rows = kh::lora_detail::adapted_rows(p, segmented);
        kh::lora_detail::shrink_rows(p, rows.data(), static_cast<int>(rows.size()));
        if (how == 3) continue;
      }
      kh::linear<E::Store>(out.data(), x.data(), l.W, l.b.data(), batch);
    }
    return (servekit::bench::now_s() - t0) * 1e3;
  };
  for (int how = 0; how < kRuns; how++) run(how);  // first touch
  std::vector<double> t[kRuns];
  for (int r = 0; r < reps; r++) {
    for (int how = 0; how < kRuns; how++) t[how].push_back(run(how));
    std::fprintf(stderr, "\r  rep %d/%d", r + 1, reps);
  }
  std::fprintf(stderr, "\n");
  const double base = servekit::bench::percentile(t[0], 50),
               shrink = servekit::bench::percentile(t[1], 50),
               fused = servekit::bench::percentile(t[2], 50),
               alone = servekit::bench::percentile(t[3], 50),
               unfused = servekit::bench::percentile(t[4], 50),
               summed = servekit::bench::percentile(t[5], 50),
               streamed = servekit::bench::percentile(t[6], 50);
  const double a_ms = a_bytes / (gbs * 1e9) * 1e3, bt_ms = bt_bytes / (gbs * 1e9) * 1e3;
  std::printf("batch %d, %d adapters (ranks %s), %s; read bandwidth %.1f GB/s (this run)\n", batch,
              n_adapters, ranks.c_str(), dispatch.c_str(), gbs);
  std::printf("%-8s %9s %11s %13s %15s\n", "", "ms", "added ms", "bytes (MB)", "at bandwidth ms");
  std::printf("%-8s %9.2f\n", "base", base);
  std::printf("%-8s %9.2f %11.2f %13.1f %15.2f   (A read at %.1f GB/s)\n", "shrink", shrink,
              shrink - base, a_bytes / 1e6, a_ms, a_bytes / ((shrink - base) * 1e6));
  std::printf("%-8s %9.2f %11s %13.1f %15.2f   (A read at %.1f GB/s: the shrink alone)\n", "shrink",
              alone, "", a_bytes / 1e6, a_ms, a_bytes / (alone * 1e6));
  std::printf(
      "%-8s %9.2f %11s %13.1f %15.2f   (A read at %.1f GB/s: summed, no FMAs, the same tasks)\n",
      "A summed", summed, "", a_bytes / 1e6, a_ms, a_bytes / (summed * 1e6));
  std::printf(
      "%-8s %9.2f %11s %13.1f %15.2f   (A's bytes at %.1f GB/s: one stream a thread, no barrier)\n",
      "streamed", streamed, "", a_bytes / 1e6, a_ms, a_bytes / (streamed * 1e6));
  std::printf("%-8s %9.2f %11.2f %13.1f %15.2f   (B^T read at %.1f GB/s)\n", "expand", fused,
              fused - shrink, bt_bytes / 1e6, bt_ms, bt_bytes / ((fused - shrink) * 1e6));
  std::printf("%-8s %9.2f %11.2f   (the deltas into a zeroed matrix the linear adds)\n", "unfused",
              unfused, unfused - base);
  std::printf("fused over base %.3fx, unfused %.3fx; floor (base + both at bandwidth) %.3fx\n",
              fused / base, unfused / base, (base + a_ms + bt_ms) / base);
}
