// SPDX-License-Identifier: Apache-2.0
// bench_adapter_store: what the adapter tiers cost.
//   (c) cold-load latency per tier, GPT-2 small, ranks 4..64 on all four linears: disk -> host
//       with the file's pages dropped from the page cache (posix_fadvise DONTNEED) and with
//       them cached, host -> device (a slot in the model), and a device hit; next to a memcpy
//       of the same bytes measured in the same run (what any copy between tiers must pay).
//   (b) engine throughput (continuous batching, lora::Gathered) against the number of
//       distinct adapters the requests draw from (1..1000), host and device tiers smaller than
//       the pool so that adapters are evicted and read again from disk; the no-LoRA engine on
//       the same requests is the peer.
// Writes adapter_load.csv, adapter_throughput.csv and adapter_throughput.png under --out.
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common.hpp"
#include "servekit/lora/adapter_store.hpp"
#include "servekit/lora/random_adapter.hpp"
#include "servekit/lora/save_adapter.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/model/random_gpt2.hpp"
#include "servekit/serve/adapter_slots.hpp"
#include "servekit/serve/engine.hpp"

namespace fs = std::filesystem;
namespace sk = servekit;
using D = sk::dims::Gpt2Small;
template <class L>
using Model = sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Paged<16>, L>>;

namespace {

// Drops a file's pages from the page cache (no root needed for clean pages).
void drop_cached(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

double ms_since(double t0) {
  return (sk::bench::now_s() - t0) * 1e3;
}

template <class T>
double median(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void cold_load(const fs::path& dir, const fs::path& out, Model<sk::lora::Gathered>& model,
               int reps) {
  std::printf(
      "== (c) adapter load latency per tier (GPT-2 small, all four linears; median of %d)\n", reps);
  std::printf("%5s %8s %13s %13s %14s %12s %11s\n", "rank", "MB", "disk cold ms", "disk warm ms",
              "host->dev ms", "memcpy ms", "dev hit us");
  std::ofstream csv(out / "adapter_load.csv");
  csv << "rank,mb,disk_cold_ms,disk_warm_ms,host_to_device_ms,memcpy_ms,device_hit_us\n";
  std::mt19937_64 rng(3);
  for (int rank : {4, 8, 16, 64}) {
    const std::string id = "r" + std::to_string(rank);
    const fs::path p = dir / ("load_" + id);
    auto a = sk::lora::random_adapter<D>({.name = id, .rank = rank, .alpha = 2.f * rank}, rng);
    sk::lora::save_adapter(a, p);
    const double mb = a.bytes() / 1e6;
    std::vector<double> cold, warm, up, copy, hit;
    for (int r = 0; r < reps; r++) {
      for (const char* f : {"adapter_config.json", "adapter_model.safetensors"}) drop_cached(p / f);
      {
        sk::lora::AdapterStore<D> store;
        const double t0 = sk::bench::now_s();
        store.get(p.string());
        cold.push_back(ms_since(t0));
      }
      sk::lora::AdapterStore<D> store;
      double t0 = sk::bench::now_s();
      auto ad = store.get(p.string());
      warm.push_back(ms_since(t0));
      sk::serve::AdapterSlots<Model<sk::lora::Gathered>> slots(model, std::size_t{1} << 32);
      t0 = sk::bench::now_s();
      const int slot = slots.place(ad);
      up.push_back(ms_since(t0));
      slots.release(slot);
      t0 = sk::bench::now_s();
      slots.acquire(p.string());
      hit.push_back(ms_since(t0) * 1e3);
      slots.clear();
      // The copy a separate device tier would make: every A and B once.
      std::vector<float> dst(a.bytes() / sizeof(float));
      t0 = sk::bench::now_s();
      std::size_t k = 0;
      for (const auto& l : ad->layers)
        for (const auto& q : l)
          if (q) {
            std::memcpy(dst.data() + k, q->a.data(), q->a.size() * 4), k += q->a.size();
            std::memcpy(dst.data() + k, q->b.data(), q->b.size() * 4), k += q->b.size();
          }
      copy.push_back(ms_since(t0));
    }
    std::printf("%5d %8.2f %13.2f %13.2f %14.4f %12.2f %11.2f\n", rank, mb, median(cold),
                median(warm), median(up), median(copy), median(hit));
    csv << rank << ',' << mb << ',' << median(cold) << ',' << median(warm) << ',' << median(up)
        << ',' << median(copy) << ',' << median(hit) << '\n';
    fs::remove_all(p);
  }
  std::printf(
      "(the host backend's device tier is host memory: an adapter moves in as a shared pointer, "
      "no copy; a GPU tier pays at least the memcpy column over PCIe)\n\n");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_adapter_store: adapter tiers: load latency and throughput vs adapters"};
  std::string out = "out/bench_adapter_store";
  std::vector<int> pools = {1, 10, 100, 1000};
  int requests = 96, batch = 16, prompt = 16, tokens = 16, reps = 5, rank = 8;
  int host_adapters = 64, device_adapters = 24;
  app.add_option("--out", out, "folder for the CSVs, the PNG and the adapters on disk");
  app.add_option("--pools", pools, "distinct adapters the requests draw from")
      ->delimiter(',')
      ->check(CLI::Range(1, 100000));
  app.add_option("--requests", requests, "requests per point")->check(CLI::Range(1, 100000));
  app.add_option("--batch", batch, "engine max_batch")->check(CLI::Range(1, 1024));
  app.add_option("--prompt", prompt, "prompt tokens per request")->check(CLI::Range(1, 512));
  app.add_option("--tokens", tokens, "generated tokens per request")->check(CLI::Range(1, 512));
  app.add_option("--rank", rank, "rank of the pool's adapters (c_attn)")->check(CLI::Range(1, 256));
  app.add_option("--host-adapters", host_adapters, "host tier capacity, in adapters")
      ->check(CLI::Range(1, 100000));
  app.add_option("--device-adapters", device_adapters, "device tier capacity, in adapters")
      ->check(CLI::Range(1, 100000));
  app.add_option("--reps", reps, "repetitions of each load measurement")->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);
  const fs::path o(out), dir = o / "adapters";
  fs::create_directories(dir);

  std::fprintf(stderr, "building GPT-2 small (random weights)...\n");
  auto tensors = sk::model::random_gpt2<D>(1);
  Model<sk::lora::None> plain(tensors);
  Model<sk::lora::Gathered> model(std::move(tensors));
  cold_load(dir, o, model, reps);

  // The pool on disk: rank `rank` on c_attn of every layer, so an adapter is small enough
  // that a thousand fit a disk quickly.
  const int n_pool = *std::max_element(pools.begin(), pools.end());
  std::mt19937_64 rng(9);
  std::size_t one = 0;
  for (int i = 0; i < n_pool; i++) {
    if (i % 50 == 0) std::fprintf(stderr, "  writing adapter %d of %d...\r", i + 1, n_pool);
    auto a = sk::lora::random_adapter<D>({.name = "p" + std::to_string(i),
                                          .rank = rank,
                                          .alpha = 2.f * rank,
                                          .targets = {true, false, false, false}},
                                         rng);
    one = a.bytes();
    sk::lora::save_adapter(a, dir / a.name);
  }
  std::fprintf(stderr, "\n");

  std::mt19937 data(5);
  auto rs = std::vector<sk::serve::Request>(requests);
  for (auto& r : rs) {
    for (int t = 0; t < prompt; t++)
      r.prompt_ids.push_back(static_cast<int32_t>(data() % D::vocab));
    r.stop = {.max_new_tokens = tokens, .stop_at_eos = false};
  }
  auto tok = sk::text::Gpt2Tokenizer::from_dir(sk::text::default_vocab_dir());
  sk::serve::EngineOptions opt{.max_batch = batch, .max_batched_tokens = batch * prompt};
  opt.adapter_host_bytes = host_adapters * one;
  opt.adapter_device_bytes = device_adapters * one;

  std::printf(
      "== (b) engine throughput vs distinct adapters: %d requests (%d + %d tokens), batch "
      "%d, rank-%d c_attn adapters of %.2f MB; host tier %d adapters, device tier %d\n",
      requests, prompt, tokens, batch, rank, one / 1e6, host_adapters, device_adapters);
  std::printf("%8s %10s %9s %8s %11s %10s %10s %11s\n", "adapters", "tokens/s", "vs base",
              "distinct", "disk loads", "host evict", "dev evict", "load ms avg");
  std::ofstream csv(o / "adapter_throughput.csv");
  csv << "pool,tokens_per_s,base_tokens_per_s,distinct,disk_loads,host_evictions,device_"
         "evictions,load_ms_mean\n";
  double base_tps;
  {
    std::fprintf(stderr, "  no LoRA...\n");
    sk::serve::Engine<Model<sk::lora::None>, sk::serve::sched::Continuous> e(plain, tok, opt);
    const double t0 = sk::bench::now_s();
    e.run_all(rs);
    base_tps = e.stats().generated_tokens / (sk::bench::now_s() - t0);  // wall clock, as below
  }
  std::printf("%8s %10.1f %9s\n", "none", base_tps, "1.00x");
  for (int n : pools) {
    std::fprintf(stderr, "  %d adapters...\n", n);
    std::mt19937 pick(n);
    std::vector<int> used;
    for (auto& r : rs) {
      const int i = static_cast<int>(pick() % n);
      r.adapter = (dir / ("p" + std::to_string(i))).string();
      used.push_back(i);
    }
    std::sort(used.begin(), used.end());
    const auto distinct = std::unique(used.begin(), used.end()) - used.begin();
    sk::serve::Engine<Model<sk::lora::Gathered>, sk::serve::sched::Continuous> e(model, tok, opt);
    const double t0 = sk::bench::now_s();
    auto res = e.run_all(rs);
    const double wall = sk::bench::now_s() - t0;
    long gen = 0;
    for (const auto& r : res) {
      if (!r.error.empty()) {
        std::fprintf(stderr, "error: %s\n", r.error.c_str());
        return 1;
      }
      gen += static_cast<long>(r.tokens.size());
    }
    const auto s = e.stats();
    const double tps = gen / wall;  // wall clock: adapter loads count against throughput
    const auto& h = s.adapters.host;
    std::printf("%8d %10.1f %8.2fx %8ld %11ld %10ld %10ld %11.2f\n", n, tps, tps / base_tps,
                static_cast<long>(distinct), h.disk_loads, h.host_evictions,
                s.adapters.device.evictions, h.disk_loads ? h.disk_load_ms / h.disk_loads : 0.0);
    std::fflush(stdout);
    csv << n << ',' << tps << ',' << base_tps << ',' << distinct << ',' << h.disk_loads << ','
        << h.host_evictions << ',' << s.adapters.device.evictions << ','
        << (h.disk_loads ? h.disk_load_ms / h.disk_loads : 0.0) << '\n';
  }
  csv.close();
  const fs::path gp = o / "adapter_throughput.gp";
  std::ofstream(gp) << "set terminal pngcairo size 800,480\nset output '"
                    << (o / "adapter_throughput.png").string()
                    << "'\nset datafile separator ','\nset key bottom left\nset logscale x 10\n"
                       "set xlabel 'distinct adapters the requests draw from'\n"
                       "set ylabel 'generated tokens/s (wall clock)'\nset grid\nset yrange [0:*]\n"
                       "set title 'GPT-2 small, host f32, continuous batching, lora::Gathered'\n"
                       "plot '"
                    << (o / "adapter_throughput.csv").string()
                    << "' using 1:2 skip 1 with linespoints lw 2 title 'with adapters', '' using "
                       "1:3 skip 1 with lines lw 2 dt 2 title 'no LoRA (same requests)'\n";
  if (std::system(("gnuplot '" + gp.string() + "' 2>/dev/null").c_str()) != 0)
    std::fprintf(stderr, "(gnuplot failed or missing: no PNG)\n");
  std::printf("wrote %s/adapter_load.csv, adapter_throughput.csv and .png\n", out.c_str());
}
