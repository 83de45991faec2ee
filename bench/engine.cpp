// SPDX-License-Identifier: Apache-2.0
// The serving engine's schedulers side by side, on one model, in one run:
//   course   the course's workload (32 requests, batch 8, every 8th wants 100 tokens, the
//            others 10): wall time and throughput of static vs continuous, beside the
//            step-count bound (static: 4 x 100 steps; continuous: about a quarter of that);
//   poisson  open-loop arrivals at increasing rates: TTFT and TPOT p50 / p99 and throughput per
//            scheduler, continuous with and without chunked prefill;
//   sweep    throughput and mean latency against batch size (the course's plot);
//   priority Poisson arrivals, every fifth urgent, first come first served vs priority
//            scheduling: the urgent requests' and the others' latency, beside the urgent ones
//            alone (bench/priority_runs.hpp);
//   masks    a decode step with JSON-schema token masks made before the forward or while it
//            runs, beside the unconstrained step (bench/mask_steps.hpp; device sampling only).
// Each part writes a CSV and a PNG (gnuplot) into --out. Host backend (bench_engine_cuda, the same
// source compiled by nvcc: the Cuda backend), f32, paged KV; the model is a seeded random GPT-2
// 124M (random weights cost what real ones do).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common.hpp"
#include "mask_steps.hpp"
#include "priority_runs.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/engine.hpp"
#if defined(__CUDACC__)
#include "servekit/backend/cuda.hpp"
#include "servekit/backend/cuda_device.hpp"
#endif

namespace fs = std::filesystem;
namespace sk = servekit;
namespace serve = servekit::serve;
using D = sk::dims::Gpt2Small;
using servekit::bench::percentile;
using servekit::bench::plot;
using servekit::bench::random_tokens;
#if defined(__CUDACC__)
using Backend = sk::backend::Cuda;
const std::string kWhere = "cuda";
#else
using Backend = sk::backend::Host;
const std::string kWhere = "host";
#endif
using Model = sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Paged<16>, sk::lora::None, Backend>>;
// The course's static batching pads on a contiguous cache and runs finished rows to the end of
// their batch; the course part runs there.
using ContigModel =
    sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Contiguous, sk::lora::None, Backend>>;

struct Args {
  std::string vocab = sk::text::default_vocab_dir().string(), out = "out/bench_engine",
              parts = "course,poisson,sweep,priority";
  int poisson_requests = 24, max_sweep = 64;
  int mask_batch = 16, mask_steps = 48, mask_rounds = 3;
  std::vector<double> rates = {0.5, 1, 2, 4};
  servekit::bench::PriorityLoad priority;
};

template <class Sched, class Model>
std::pair<double, serve::EngineStats> timed(Model& m, const sk::text::Gpt2Tokenizer& tok,
                                            const std::vector<serve::Request>& rs,
                                            serve::EngineOptions opt,
                                            std::vector<serve::Result>* out = nullptr) {
  serve::Engine<Model, Sched> e(m, tok, opt);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = e.run_all(rs, [&](int done, int total) {
    std::fprintf(stderr, "\r    %-10s %3d/%d", std::string(Sched::name).c_str(), done, total);
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "\n");
  if (out) *out = std::move(r);
  return {s, e.stats()};
}

void course(ContigModel& m, const sk::text::Gpt2Tokenizer& tok, const Args& a) {
  std::printf(
      "\n== course workload: 32 requests, batch 8, every 8th wants 100 tokens, others 10\n");
  std::mt19937_64 rng(1);
  std::vector<serve::Request> rs(32);
  long wanted = 0;
  for (int i = 0; i < 32; i++) {
    rs[i].prompt_ids = random_tokens(rng, 8);
    rs[i].stop = {.max_new_tokens = i % 8 == 0 ? 100 : 10, .stop_at_eos = false};
    wanted += rs[i].stop.max_new_tokens;
  }
  serve::EngineOptions opt{.max_batch = 8};
  auto [ts, ss] = timed<serve::sched::Static>(m, tok, rs, opt);
  auto [tc, sc] = timed<serve::sched::Continuous>(m, tok, rs, opt);
  std::printf("%-11s %8s %10s %7s %14s\n", "scheduler", "time s", "tokens/s", "steps",
              "step bound");
  std::printf("%-11s %8.2f %10.1f %7ld %14d\n", "static", ts, wanted / ts, ss.steps, 400);
  std::printf("%-11s %8.2f %10.1f %7ld %14ld\n", "continuous", tc, wanted / tc, sc.steps,
              (wanted + 7) / 8);
  std::printf("continuous / static: %.2fx throughput (steps: %.2fx)\n", ts / tc,
              static_cast<double>(ss.steps) / sc.steps);
  std::ofstream f(fs::path(a.out) / "course.csv");
  f << "scheduler,seconds,tokens_per_s,steps\nstatic," << ts << ',' << wanted / ts << ','
    << ss.steps << "\ncontinuous," << tc << ',' << wanted / tc << ',' << sc.steps << '\n';
  f.close();
  plot(fs::path(a.out) / "course.gp",
       "set terminal pngcairo size 700,450\nset output '" +
           (fs::path(a.out) / "course.png").string() +
           "'\nset datafile separator ','\nset style fill solid 0.8\nset boxwidth 0.5\nset grid y\n"
           "set title 'Course workload (" +
           ContigModel::name() + ", " + kWhere +
           ")'\nset ylabel 'tokens/s'\n"
           "set yrange [0:*]\nplot '" +
           (fs::path(a.out) / "course.csv").string() +
           "' every ::1 using 0:3:xtic(1) with boxes lc rgb '#1f77b4' notitle\n");
}

void poisson(Model& m, const sk::text::Gpt2Tokenizer& tok, const Args& a) {
  std::printf("\n== open-loop Poisson arrivals: %d requests, prompts 16..256, 16..64 new tokens\n",
              a.poisson_requests);
  std::printf("%-22s %6s %9s %9s %9s %9s %10s %8s\n", "scheduler", "rate/s", "TTFT p50", "TTFT p99",
              "TPOT p50", "TPOT p99", "tokens/s", "preempt");
  std::ofstream f(fs::path(a.out) / "poisson.csv");
  f << "scheduler,rate,ttft_p50_ms,ttft_p99_ms,tpot_p50_ms,tpot_p99_ms,tokens_per_s\n";
  struct Variant {
    const char* name;
    int kind;  // 0 static, 1 continuous
    bool chunked;
  };
  for (Variant v : {Variant{"static", 0, false}, Variant{"continuous", 1, false},
                    Variant{"continuous+chunked", 1, true}}) {
    for (double rate : a.rates) {
      std::mt19937_64 rng(7);
      std::exponential_distribution<double> gap(rate);
      std::vector<serve::Request> rs(a.poisson_requests);
      std::vector<double> at;
      double t = 0;
      for (auto& r : rs) {
        r.prompt_ids = random_tokens(rng, 16 + static_cast<int>(rng() % 241));
        r.stop = {.max_new_tokens = 16 + static_cast<int>(rng() % 49), .stop_at_eos = false};
        at.push_back(t);
        t += gap(rng);
      }
      serve::EngineOptions opt{.max_batch = 8,
                               .max_batched_tokens = v.chunked ? 128 : 2048,
                               .chunked_prefill = v.chunked};
      auto run = [&]<class Sched>() {
        serve::Engine<Model, Sched> e(m, tok, opt);
        std::vector<serve::RequestHandle> hs;
        const auto t0 = std::chrono::steady_clock::now();
        for (std::size_t i = 0; i < rs.size(); i++) {
          std::this_thread::sleep_until(t0 + std::chrono::duration<double>(at[i]));
          hs.push_back(e.submit(rs[i]));
          std::fprintf(stderr, "\r    %s @ %.1f/s: submitted %zu", v.name, rate, i + 1);
        }
        std::vector<double> ttft, tpot;
        long toks = 0;
        for (auto& h : hs) {
          auto r = h.get();
          ttft.push_back(r.metrics.ttft_ms);
          tpot.push_back(r.metrics.tpot_ms);
          toks += r.metrics.generated_tokens;
        }
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "\n");
        const auto st = e.stats();
        std::printf("%-22s %6.1f %9.0f %9.0f %9.1f %9.1f %10.1f %8ld\n", v.name, rate,
                    percentile(ttft, 50), percentile(ttft, 99), percentile(tpot, 50),
                    percentile(tpot, 99), toks / s, st.preemptions);
        f << v.name << ',' << rate << ',' << percentile(ttft, 50) << ',' << percentile(ttft, 99)
          << ',' << percentile(tpot, 50) << ',' << percentile(tpot, 99) << ',' << toks / s << '\n';
        std::fflush(stdout);
      };
      if (v.kind == 0)
        run.template operator()<serve::sched::Static>();
      else
        run.template operator()<serve::sched::Continuous>();
    }
  }
  f.close();
  const std::string csv = (fs::path(a.out) / "poisson.csv").string();
  plot(fs::path(a.out) / "poisson.gp",
       "set terminal pngcairo size 1000,450\nset output '" +
           (fs::path(a.out) / "poisson.png").string() +
           "'\nset datafile separator ','\nset multiplot layout 1,2 title 'Poisson arrivals (" +
           Model::name() + ", " + kWhere +
           ")'\nset grid\nset logscale y\nset xlabel 'arrival rate (req/s)'\n"
           "set ylabel 'TTFT p50 (ms)'\nset key top left\n"
           "plot for [s in 'static continuous continuous+chunked'] '" +
           csv +
           "' using 2:(strcol(1) eq s ? $3 : 1/0) with linespoints title s\n"
           "set ylabel 'TPOT p50 (ms)'\n"
           "plot for [s in 'static continuous continuous+chunked'] '" +
           csv +
           "' using 2:(strcol(1) eq s ? $5 : 1/0) with linespoints title s\nunset multiplot\n");
}

void sweep(Model& m, const sk::text::Gpt2Tokenizer& tok, const Args& a) {
  std::printf("\n== batch size sweep: B requests of 16 prompt + 16 new tokens, all at once\n");
  std::printf("%6s %10s %16s\n", "batch", "tokens/s", "mean latency s");
  std::ofstream f(fs::path(a.out) / "sweep.csv");
  f << "batch,tokens_per_s,mean_latency_s\n";
  for (int b = 1; b <= a.max_sweep; b *= 2) {
    std::mt19937_64 rng(3);
    std::vector<serve::Request> rs(b);
    for (auto& r : rs) {
      r.prompt_ids = random_tokens(rng, 16);
      r.stop = {.max_new_tokens = 16, .stop_at_eos = false};
    }
    std::vector<serve::Result> res;
    auto [s, st] = timed<serve::sched::Continuous>(m, tok, rs, {.max_batch = b}, &res);
    double lat = 0;
    for (auto& r : res) lat += r.metrics.e2e_ms / 1e3;
    std::printf("%6d %10.1f %16.2f\n", b, st.generated_tokens / s, lat / b);
    f << b << ',' << st.generated_tokens / s << ',' << lat / b << '\n';
    std::fflush(stdout);
  }
  f.close();
  plot(fs::path(a.out) / "sweep.gp",
       "set terminal pngcairo size 900,450\nset output '" +
           (fs::path(a.out) / "sweep.png").string() +
           "'\nset datafile separator ','\nset grid\nset logscale x 2\nset key top left\n"
           "set title 'Throughput and latency vs batch size (" +
           Model::name() + ", " + kWhere +
           ")'\nset xlabel 'batch size'\nset ylabel 'tokens/s' tc rgb 'red'\n"
           "set y2label 'mean latency (s)' tc rgb 'blue'\nset ytics nomirror\nset y2tics\nplot '" +
           (fs::path(a.out) / "sweep.csv").string() +
           "' every ::1 using 1:2 axes x1y1 with linespoints lc rgb 'red' title 'throughput', '' "
           "every ::1 using 1:3 axes x1y2 with linespoints lc rgb 'blue' title 'latency'\n");
}

// The masks part, on a backend that picks tokens on the device (the host samples from logits
// it already has, after the step: there is no forward to hide the masks behind).
template <class M>
void masks(M& m, const sk::text::Gpt2Tokenizer& tok, const Args& a) {
  if constexpr (M::kDeviceSampling)
    sk::bench::mask_steps(m, tok, a.mask_batch, a.mask_steps, a.mask_rounds, a.out, kWhere);
  else
    std::printf("\n== token masks: needs device sampling (bench_engine_cuda); skipped\n");
}

int main(int argc, char** argv) {
  CLI::App app{"serving engine benchmark: schedulers side by side"};
  Args a;
  app.add_option("--parts", a.parts, "comma-separated: course, poisson, sweep, priority, masks");
  app.add_option("--out", a.out, "folder for CSVs and PNGs");
  app.add_option("--vocab", a.vocab, "tokenizer folder");
  app.add_option("--poisson-requests", a.poisson_requests, "requests per Poisson run");
  app.add_option("--rates", a.rates, "Poisson arrival rates (requests/s), comma-separated")
      ->delimiter(',');
  app.add_option("--max-sweep", a.max_sweep, "largest batch of the sweep");
  app.add_option("--priority-requests", a.priority.requests, "priority: requests a run");
  app.add_option("--priority-rate", a.priority.rate, "priority: arrivals per second");
  app.add_option("--priority-batch", a.priority.max_batch, "priority: the engine's max batch");
  app.add_option("--mask-batch", a.mask_batch, "masks: rows a step");
  app.add_option("--mask-steps", a.mask_steps, "masks: decode steps a run");
  app.add_option("--mask-rounds", a.mask_rounds, "masks: rounds of the three runs");
  CLI11_PARSE(app, argc, argv);
#if defined(__CUDACC__)
  if (const std::string why = sk::backend::cuda_device_missing(); !why.empty()) {
    std::fprintf(stderr, "bench_engine_cuda: no CUDA device (%s); nothing run\n", why.c_str());
    return sk::backend::kNoCudaDeviceExit;
  }
  std::printf("device: %s\n", sk::backend::cuda_device_summary().c_str());
#endif
  try {
    fs::create_directories(a.out);
    auto tok = sk::text::Gpt2Tokenizer::from_dir(a.vocab);
    std::fprintf(stderr, "loading random GPT-2 124M (seed 0) ...\n");
    auto m = Model::random(0);
    std::printf("composition: %s, %u hardware threads\n", Model::name().c_str(),
                std::thread::hardware_concurrency());
    if (a.parts.find("course") != std::string::npos) {
      auto cm = ContigModel::random(0);
      std::printf("course part: %s\n", ContigModel::name().c_str());
      course(cm, tok, a);
    }
    if (a.parts.find("poisson") != std::string::npos) poisson(m, tok, a);
    if (a.parts.find("sweep") != std::string::npos) sweep(m, tok, a);
    if (a.parts.find("priority") != std::string::npos)
      servekit::bench::priority_part(m, tok, a.priority, a.out, kWhere);
    if (a.parts.find("masks") != std::string::npos) {
      auto cm = ContigModel::random(0);
      masks(cm, tok, a);
    }
    std::printf("\nCSVs and PNGs in %s\n", a.out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_engine: error: %s\n", e.what());
    return 2;
  }
}
