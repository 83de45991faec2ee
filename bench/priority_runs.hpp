// SPDX-License-Identifier: Apache-2.0
#pragma once
// Priorities under load, measured: the same open-loop Poisson arrivals (every fifth request
// urgent, the others not) through the continuous scheduler first come, first served, then with
// priority scheduling (the urgent ones at priority -1). Printed for the urgent requests and the
// others apart: TTFT and end-to-end p50 / p99, beside each urgent request alone on an idle
// engine (its floor); throughput and preemptions for the whole run. priority.csv and
// priority.png in --out.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common.hpp"
#include "servekit/serve/engine.hpp"

namespace servekit::bench {

struct PriorityLoad {
  int requests = 40;
  double rate = 12;  // arrivals per second
  int max_batch = 4;
};

struct PriorityRow {
  std::string policy;
  double urgent_ttft_p50 = 0, urgent_ttft_p99 = 0, urgent_e2e_p50 = 0, urgent_e2e_p99 = 0;
  double other_ttft_p50 = 0, other_ttft_p99 = 0, other_e2e_p50 = 0, other_e2e_p99 = 0;
  double tokens_per_s = 0;
  long preemptions = 0;
};

inline bool is_urgent(std::size_t i) {
  return i % 5 == 2;
}

template <class Model>
PriorityRow priority_run(Model& m, const text::Gpt2Tokenizer& tok, std::vector<serve::Request> rs,
                         const std::vector<double>& at, int max_batch, bool priorities) {
  serve::EngineOptions opt{.max_batch = max_batch};
  opt.priority_scheduling = priorities;
  for (std::size_t i = 0; i < rs.size(); i++) rs[i].priority = priorities && is_urgent(i) ? -1 : 0;
  serve::Engine<Model, serve::sched::Continuous> e(m, tok, opt);
  const char* name = priorities ? "priority" : "fcfs";
  std::vector<serve::RequestHandle> hs;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < rs.size(); i++) {
    std::this_thread::sleep_until(t0 + std::chrono::duration<double>(at[i]));
    hs.push_back(e.submit(rs[i]));
    std::fprintf(stderr, "\r    %-8s submitted %zu/%zu", name, i + 1, rs.size());
  }
  std::vector<double> ttft[2], e2e[2];
  long toks = 0;
  for (std::size_t i = 0; i < hs.size(); i++) {
    const auto r = hs[i].get();
    ttft[is_urgent(i)].push_back(r.metrics.ttft_ms);
    e2e[is_urgent(i)].push_back(r.metrics.e2e_ms);
    toks += r.metrics.generated_tokens;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "\n");
  return {name,
          percentile(ttft[1], 50),
          percentile(ttft[1], 99),
          percentile(e2e[1], 50),
          percentile(e2e[1], 99),
          percentile(ttft[0], 50),
          percentile(ttft[0], 99),
          percentile(e2e[0], 50),
          percentile(e2e[0], 99),
          toks / s,
          e.stats().preemptions};
}

template <class Model>
void priority_part(Model& m, const text::Gpt2Tokenizer& tok, const PriorityLoad& load,
                   const std::filesystem::path& out, const std::string& where) {
  std::printf(
      "\n== priorities: %d Poisson arrivals at %.1f/s, prompts 16..128, 16..64 new tokens, "
      "max batch %d; every fifth urgent\n",
      load.requests, load.rate, load.max_batch);
  std::mt19937_64 rng(11);
  std::exponential_distribution<double> gap(load.rate);
  std::vector<serve::Request> rs(load.requests);
  std::vector<double> at;
  double t = 0;
  for (auto& r : rs) {
    r.prompt_ids = random_tokens(rng, 16 + static_cast<int>(rng() % 113));
    r.stop = {.max_new_tokens = 16 + static_cast<int>(rng() % 49), .stop_at_eos = false};
    at.push_back(t);
    t += gap(rng);
  }
  // The floor: each urgent request alone on an idle engine.
  std::vector<double> alone_ttft, alone_e2e;
  {
    serve::Engine<Model, serve::sched::Continuous> e(m, tok, {.max_batch = load.max_batch});
    for (std::size_t i = 0; i < rs.size(); i++)
      if (is_urgent(i)) {
        const auto r = e.generate(rs[i]);
        alone_ttft.push_back(r.metrics.ttft_ms);
        alone_e2e.push_back(r.metrics.e2e_ms);
        std::fprintf(stderr, "\r    alone    %zu", alone_e2e.size());
      }
    std::fprintf(stderr, "\n");
  }
  const PriorityRow rows[] = {priority_run(m, tok, rs, at, load.max_batch, false),
                              priority_run(m, tok, rs, at, load.max_batch, true)};
  std::printf("%-9s %22s %22s %22s %22s %9s %8s\n", "", "urgent TTFT p50/p99 ms",
              "urgent e2e p50/p99 ms", "others TTFT p50/p99 ms", "others e2e p50/p99 ms",
              "tokens/s", "preempt");
  std::printf("%-9s %10.0f %11s %10.0f %11s %22s %22s %9s %8s\n", "alone",
              percentile(alone_ttft, 50), "", percentile(alone_e2e, 50), "", "", "", "", "");
  std::ofstream f(out / "priority.csv");
  f << "policy,urgent_ttft_p50_ms,urgent_ttft_p99_ms,urgent_e2e_p50_ms,urgent_e2e_p99_ms,"
       "other_ttft_p50_ms,other_ttft_p99_ms,other_e2e_p50_ms,other_e2e_p99_ms,tokens_per_s,"
       "preemptions\n";
  for (const auto& r : rows) {
    std::printf("%-9s %10.0f %11.0f %10.0f %11.0f %10.0f %11.0f %10.0f %11.0f %9.1f %8ld\n",
                r.policy.c_str(), r.urgent_ttft_p50, r.urgent_ttft_p99, r.urgent_e2e_p50,
                r.urgent_e2e_p99, r.other_ttft_p50, r.other_ttft_p99, r.other_e2e_p50,
                r.other_e2e_p99, r.tokens_per_s, r.preemptions);
    f << r.policy << ',' << r.urgent_ttft_p50 << ',' << r.urgent_ttft_p99 << ',' << r.urgent_e2e_p50
      << ',' << r.urgent_e2e_p99 << ',' << r.other_ttft_p50 << ',' << r.other_ttft_p99 << ','
      << r.other_e2e_p50 << ',' << r.other_e2e_p99 << ',' << r.tokens_per_s << ',' << r.preemptions
      << '\n';
  }
  f.close();
  std::printf("urgent e2e p50: fcfs %.2fx alone, priority %.2fx alone; others' e2e p50: %.2fx\n",
              rows[0].urgent_e2e_p50 / percentile(alone_e2e, 50),
              rows[1].urgent_e2e_p50 / percentile(alone_e2e, 50),
              rows[1].other_e2e_p50 / rows[0].other_e2e_p50);
  const std::string csv = (out / "priority.csv").string();
  plot(out / "priority.gp",
       "set terminal pngcairo size 900,450\nset output '" + (out / "priority.png").string() +
           "'\nset datafile separator ','\nset style data histograms\n"
           "set style histogram clustered gap 1\nset style fill solid 0.8\nset grid y\n"
           "set key top left\nset ylabel 'ms'\nset yrange [0:*]\n"
           "set title 'Priorities under Poisson load (" +
           Model::name() + ", " + where + "; urgent alone: e2e p50 " +
           std::to_string(static_cast<int>(percentile(alone_e2e, 50))) + " ms)'\nplot '" + csv +
           "' every ::1 using 2:xtic(1) title 'urgent TTFT p50', '' every ::1 using 4 title "
           "'urgent e2e p50', '' every ::1 using 6 title 'others TTFT p50', '' every ::1 using "
           "8 title 'others e2e p50'\n");
}

}  // namespace servekit::bench
