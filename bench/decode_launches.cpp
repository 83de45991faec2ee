// SPDX-License-Identifier: Apache-2.0
// What a GPT-2 124M decode step asks of a GPU, listed without one: the Cuda backend's step run
// by the emulator in dry-run mode (simt::DryRun: launches are checked and logged, no block
// runs), per weight format at batches 1, 8 and 64 with 512 tokens of context. For each
// launch: the kernel, its grid in CTAs and in waves of an H100's 132 SMs, and the bytes it
// moves by its launcher's model (LaunchRecord::bytes). For each step: the bytes it must move
// (every weight once, the KV rows it attends to and writes, the activations and logits), the
// bytes its launches move, their ratio, and both at the H100's 3.35 TB/s: the floor of the
// step's time, and the step as launched if every kernel ran at that bandwidth. A linear whose
// grid is under 2 CTAs per SM cannot pull that bandwidth.
// --lora: instead, the LoRA launches of an f16 decode step (shrink, expand and the delta
// buffer's zeroing, over the 48 linears) with 64 adapters of ranks 4..16 on every linear, each
// row its own, 8 shared or one for all, per policy (gathered, segmented): the bytes they move
// by their launchers' models against what the adapters' work must move (each adapter's A and B
// once, the adapted rows' x read and their deltas written once).
//   bench_decode_launches [--context 512] [--batches 1 8 64] [--csv out.csv] [--launches]
//                         [--lora]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common.hpp"
#include "servekit/backend/emulated_device.hpp"
#include "servekit/lora/random_adapter.hpp"
#include "servekit/model/dry_step.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/model/random_gpt2.hpp"
#include "servekit/model/step_bytes.hpp"

namespace sk = servekit;
namespace simt = servekit::simt;
using D = sk::dims::Gpt2Small;

constexpr int kSms = 132;             // H100 SXM
constexpr double kH100Bps = 3.35e12;  // HBM3 read bandwidth

struct Opts {
  int context = 512;
  std::vector<int> batches{1, 8, 64};
  std::string csv;
  bool launches = false;  // print every launch, not only the summary
  int tiles = 0;          // column tiles a decode linear's block takes; 0: the launchers choose
  bool lora = false;      // the LoRA launches instead (bench_lora below)
};

std::string short_name(std::string k) {
  for (const std::string p : {"servekit::kernels::", "servekit::"})
    for (std::size_t i; (i = k.find(p)) != std::string::npos;) k.erase(i, p.size());
  return k;
}
bool is_linear(const std::string& k) {
  return k.find("linear") != std::string::npos || k.find("lm_head") != std::string::npos;
}

template <class F>
void bench_format(const Opts& o, const sk::model::Gpt2Tensors& t, std::FILE* csv) {
  using Model =
      sk::Gpt2<sk::Config<D, F, sk::kv::Paged<16>, sk::lora::None, sk::backend::EmulatedDevice>>;
  std::fprintf(stderr, "%s: quantizing ...\n", Model::name().c_str());
  Model model(t);
  model.set_graphs(false);  // the eager step: its launches are the graph's nodes
  for (int B : o.batches) {
    auto cache = model.make_cache(B, o.context + 1);
    const auto launched = sk::model::dry_decode_step(model, cache, B, o.context);
    const auto floor = sk::model::decode_step_bytes<D>(model.weight_bytes(), B, o.context);
    const double must = floor.must();
    unsigned long long min_linear = ~0ull, min_warps = ~0ull;
    int n_linear = 0, thin = 0;
    double moved = 0;
    for (const auto& r : launched) {
      const std::string k = short_name(r.kernel);
      moved += static_cast<double>(r.bytes);
      if (o.launches)
        std::printf("  %-64.64s %8llu CTAs %6.2f waves %5u threads %10.3f MiB\n", k.c_str(),
                    r.blocks(), static_cast<double>(r.blocks()) / kSms,
                    r.block.x * r.block.y * r.block.z, r.bytes / 1048576.0);
      if (is_linear(k)) {
        n_linear++;
        min_linear = std::min(min_linear, r.blocks());
        min_warps =
            std::min(min_warps, r.blocks() * ((r.block.x * r.block.y * r.block.z + 31) / 32));
        thin += r.blocks() < 2ull * kSms;
      }
      if (csv)
        std::fprintf(csv, "%s,%d,\"%s\",%llu,%.4f,%zu\n", Model::name().c_str(), B, k.c_str(),
                     r.blocks(), static_cast<double>(r.blocks()) / kSms, r.bytes);
    }
    std::printf(
        "%-46s %5d %8zu %8d %8llu %9llu %5d %9.1f %9.1f %9.1f %10.1f %10.1f %6.2fx %9.1f %9.1f\n",
        Model::name().c_str(), B, launched.size(), n_linear, min_linear, min_warps, thin,
        floor.weights / 1048576.0, floor.kv / 1048576.0, floor.act / 1048576.0, must / 1048576.0,
        moved / 1048576.0, moved / must, must / kH100Bps * 1e6, moved / kH100Bps * 1e6);
    std::fflush(stdout);
  }
}

// --lora (above). The adapters: 64, ranks 4..16 drawn once, every linear adapted. Fmt: the
// base weights' format, and with it the adapters' (Gpt2::LoraFormat: 16-bit for the segmented
// policy's tensor-core kernels in a 16-bit composition, fp32 otherwise).
template <class Fmt, class Policy>
void bench_lora(const Opts& o, const sk::model::Gpt2Tensors& t,
                const std::vector<sk::lora::Adapter>& adapters, std::FILE* csv) {
  using Model =
      sk::Gpt2<sk::Config<D, Fmt, sk::kv::Paged<16>, Policy, sk::backend::EmulatedDevice>>;
  using AdapterFmt = typename Model::LoraFormat;
  const double element = std::is_same_v<AdapterFmt, sk::weights::F32> ? 4 : 2;
  Model model(t);
  model.set_graphs(false);
  for (const auto& a : adapters) model.add_adapter(a);
  const int n_ad = static_cast<int>(adapters.size());
  for (int B : o.batches)
    for (int share : {0, 8, 1}) {  // each row its own adapter, 8 shared, one for all
      std::vector<int32_t> slots(B);
      for (int r = 0; r < B; r++) slots[r] = share == 0 ? r % n_ad : r % share;
      auto cache = model.make_cache(B, o.context + 1);
      const auto launched = sk::model::dry_decode_step(model, cache, B, o.context, slots);
      const double must = sk::model::lora_step_bytes<D>(adapters, slots, element);
      double shrink = 0, expand = 0, zero = 0;
      int n = 0;
      for (const auto& r : launched) {
        const std::string k = short_name(r.kernel);
        const bool is_zero = k.find("zero_kernel") != std::string::npos;
        if (k.find("lora_") == std::string::npos && !is_zero) continue;
        n++;
        (is_zero ? zero : k.find("shrink") != std::string::npos ? shrink : expand) += r.bytes;
        if (csv)
          std::fprintf(csv, "%s,%d,\"%s\",%llu,%.4f,%zu\n", Model::name().c_str(), B, k.c_str(),
                       r.blocks(), static_cast<double>(r.blocks()) / kSms, r.bytes);
      }
      const double M = 1048576.0, moved = shrink + expand;
      std::printf(
          "%-5s %-10s %-5s %-10s %5d %8d %10.2f %10.2f %10.2f %10.2f %10.2f %7.2fx %7.2fx\n",
          std::string(Fmt::name).c_str(), std::string(Policy::name).c_str(),
          std::string(AdapterFmt::name).c_str(),
          share == 0   ? "own"
          : share == 8 ? "8 shared"
                       : "one",
          B, n, shrink / M, expand / M, zero / M, moved / M, must / M, moved / must,
          (moved + zero) / must);
      std::fflush(stdout);
    }
}

int main(int argc, char** argv) {
  CLI::App app{"bench_decode_launches: a GPT-2 124M Cuda decode step's launches, listed dry"};
  Opts o;
  app.add_option("--context", o.context, "tokens of context per sequence");
  app.add_option("--batches", o.batches, "decode batch sizes");
  app.add_option("--csv", o.csv, "also write every launch to this CSV file");
  app.add_flag("--launches", o.launches, "print every launch");
  app.add_option("--tiles-per-block", o.tiles,
                 "column tiles a decode linear's block takes (0: the launchers choose)")
      ->check(CLI::Range(0, 8));
  app.add_flag("--lora", o.lora, "the LoRA launches of f32 and f16 steps with 64 adapters instead");
  CLI11_PARSE(app, argc, argv);
  const sk::kernels::ForceTilesPerBlock force(o.tiles);
  std::FILE* csv = sk::bench::open_csv(o.csv, "composition,batch,kernel,ctas,waves,bytes\n");
  if (o.lora) {
    std::fprintf(stderr, "making random GPT-2 124M and 64 adapters ...\n");
    const auto t = sk::model::random_gpt2<D>(1);
    std::mt19937_64 rng(7);
    std::vector<sk::lora::Adapter> adapters;
    for (int i = 0; i < 64; i++) {
      sk::lora::RandomAdapterSpec spec{.name = "a" + std::to_string(i),
                                       .rank = 4 + static_cast<int>(rng() % 13)};
      adapters.push_back(sk::lora::random_adapter<D>(spec, rng));
    }
    std::printf(
        "LoRA launches of a GPT-2 124M decode step at %d tokens of context, dry run; 64 "
        "adapters, ranks 4..16, every linear; stored as `stored` (f16: the segmented policy's "
        "tensor-core kernels). moved: shrink + expand by their launchers' models; must: each "
        "adapter's A and B once as stored, each row's x and delta once; zero: the delta buffer "
        "zeroed before each adapted linear\n",
        o.context);
    std::printf("%-5s %-10s %-5s %-10s %5s %8s %10s %10s %10s %10s %10s %8s %8s\n", "base",
                "policy", "store", "adapters", "batch", "launches", "shrink MiB", "expand MiB",
                "zero MiB", "moved MiB", "must MiB", "ratio", "w/ zero");
    bench_lora<sk::weights::F32, sk::lora::Gathered>(o, t, adapters, csv);
    bench_lora<sk::weights::F32, sk::lora::Segmented>(o, t, adapters, csv);
    bench_lora<sk::weights::F16, sk::lora::Gathered>(o, t, adapters, csv);
    bench_lora<sk::weights::F16, sk::lora::Segmented>(o, t, adapters, csv);
    if (csv) std::fclose(csv);
    return 0;
  }
  std::printf(
      "decode step of GPT-2 124M at %d tokens of context, launched as on a GPU "
      "(dry run); H100: %d SMs, %.2f TB/s\n",
      o.context, kSms, kH100Bps / 1e12);
  std::printf(
      "thin: linears with fewer than 2 CTAs per SM (min warps: the fewest warps a linear "
      "launches). must: weights + KV + activations, "
      "each once; moved: what the launches move (their launchers' models); floor / "
      "launched us: those bytes at that bandwidth\n");
  std::printf("%-46s %5s %8s %8s %8s %9s %5s %9s %9s %9s %10s %10s %7s %9s %9s\n", "composition",
              "batch", "launches", "linears", "min CTAs", "min warps", "thin", "wt MiB", "KV MiB",
              "act MiB", "must MiB", "moved MiB", "ratio", "floor us", "launch us");
  std::fprintf(stderr, "making random GPT-2 124M ...\n");
  const auto t = sk::model::random_gpt2<D>(1);
  bench_format<sk::weights::F32>(o, t, csv);
  bench_format<sk::weights::F16>(o, t, csv);
  bench_format<sk::weights::BF16>(o, t, csv);
  bench_format<sk::weights::U8ZeroPoint<sk::weights::PerChannel>>(o, t, csv);
  bench_format<sk::weights::W8A8<sk::weights::PerChannel>>(o, t, csv);
  if (csv) std::fclose(csv);
}
