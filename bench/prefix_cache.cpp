// SPDX-License-Identifier: Apache-2.0
// Prefix caching, off and on, in one run (rounds alternate which goes first):
//   system  N requests at once, each a common system prompt and a suffix of its own, at several
//           shares of shared prompt tokens: TTFT p50 / p99 and throughput, beside the bound
//           (prompt tokens looked up / prompt tokens computed);
//   chat    8 conversations of 6 turns, each turn resending the whole history: TTFT per turn;
//   lookup  the cost of looking a prompt up (hash chain + token check) beside a step's time;
//   pool    hit rate against the bound on cached blocks nobody holds (LRU eviction).
// Each part writes a CSV and a PNG (gnuplot) into --out. Host backend, f32, paged KV; the
// default model is a seeded random GPT-2 124M (random weights cost what real ones do).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/serve/engine.hpp"

namespace fs = std::filesystem;
namespace sk = servekit;
namespace serve = servekit::serve;
using D = sk::dims::Gpt2Small;
using Model = sk::Gpt2<sk::Config<D, sk::weights::F32, sk::kv::Paged<16>>>;
using Clock = std::chrono::steady_clock;
using servekit::bench::percentile;
using servekit::bench::plot;
using servekit::bench::random_tokens;

struct Args {
  std::string vocab = sk::text::default_vocab_dir().string(), out = "out/bench_prefix_cache",
              parts = "system,chat,lookup,pool";
  int requests = 64, prompt = 544, new_tokens = 16, rounds = 2, max_batch = 64;
  std::vector<double> shares = {0, 0.5, 0.9, 512.0 / 544};
};

struct Run {
  std::vector<serve::Result> results;
  double seconds = 0;
  serve::EngineStats stats;
};

// All of rs at once through a fresh engine (its cache starts empty).
Run burst(Model& m, const sk::text::Gpt2Tokenizer& tok, const std::vector<serve::Request>& rs,
          serve::EngineOptions opt, const char* what) {
  serve::Engine<Model, serve::sched::Continuous> e(m, tok, opt);
  Run r;
  const auto t0 = Clock::now();
  r.results = e.run_all(rs, [&](int done, int total) {
    std::fprintf(stderr, "\r    %-28s %3d/%d", what, done, total);
  });
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  std::fprintf(stderr, "\n");
  r.stats = e.stats();
  return r;
}

double g_step_ms = 0;  // a step's mean time in the system part, for the lookup part

void system_prompt(Model& m, const sk::text::Gpt2Tokenizer& tok, const Args& a) {
  std::printf("\n== shared system prompt: %d requests at once, %d-token prompts, %d new tokens\n",
              a.requests, a.prompt, a.new_tokens);
  std::printf("%7s %-4s %10s %10s %10s %9s %9s %11s\n", "shared", "mode", "TTFT p50", "TTFT p99",
              "wall s", "tok/s", "hit rate", "bound x");
  std::ofstream f(fs::path(a.out) / "system.csv");
  f << "shared,ttft_p50_off_ms,ttft_p99_off_ms,ttft_p50_on_ms,ttft_p99_on_ms,tokens_per_s_off,"
       "tokens_per_s_on,hit_rate,bound\n";
  double steps = 0, busy = 0;
  for (double share : a.shares) {
    const int prefix = static_cast<int>(share * a.prompt + 0.5);
    std::mt19937_64 rng(3);
    const auto system = random_tokens(rng, prefix);
    std::vector<serve::Request> rs(a.requests);
    for (auto& r : rs) {
      r.prompt_ids = system;
      const auto own = random_tokens(rng, a.prompt - prefix);
      r.prompt_ids.insert(r.prompt_ids.end(), own.begin(), own.end());
      r.stop = {.max_new_tokens = a.new_tokens, .stop_at_eos = false};
    }
    std::vector<double> ttft[2], wall[2], hit(2, 0);
    for (int round = 0; round < a.rounds; round++)
      for (int k = 0; k < 2; k++) {
        const int on = (round + k) % 2;  // alternate which goes first
        serve::EngineOptions opt{.max_batch = a.max_batch, .max_batched_tokens = 512};
        opt.prefix_caching = on;
        const std::string what = std::to_string(prefix) + " shared, " + (on ? "on" : "off");
        Run r = burst(m, tok, rs, opt, what.c_str());
        for (const auto& x : r.results) ttft[on].push_back(x.metrics.ttft_ms);
        wall[on].push_back(r.seconds);
        hit[on] = r.stats.prefix_hit_rate();
        steps += r.stats.steps, busy += r.stats.busy_s;
      }
    for (int on : {0, 1}) {
      const double s = percentile(wall[on], 50);
      const double toks = double(a.requests) * (a.prompt + a.new_tokens) / s;
      const double bound = 1 / (1 - hit[on]);
      std::printf("%6.0f%% %-4s %8.0f ms %8.0f ms %10.2f %9.1f %8.1f%% %10.2fx\n", 100 * share,
                  on ? "on" : "off", percentile(ttft[on], 50), percentile(ttft[on], 99), s, toks,
                  100 * hit[on], bound);
    }
    auto tps = [&](int on) {
      return double(a.requests) * (a.prompt + a.new_tokens) / percentile(wall[on], 50);
    };
    f << share << ',' << percentile(ttft[0], 50) << ',' << percentile(ttft[0], 99) << ','
      << percentile(ttft[1], 50) << ',' << percentile(ttft[1], 99) << ',' << tps(0) << ',' << tps(1)
      << ',' << hit[1] << ',' << 1 / (1 - hit[1]) << '\n';
    std::printf("        on / off: TTFT p50 %.2fx lower, throughput %.2fx\n",
                percentile(ttft[0], 50) / percentile(ttft[1], 50),
                percentile(wall[0], 50) / percentile(wall[1], 50));
    std::fflush(stdout);
  }
  g_step_ms = steps > 0 ? 1000 * busy / steps : 0;
  f.close();
  const std::string csv = (fs::path(a.out) / "system.csv").string();
  plot(
      fs::path(a.out) / "system.gp",
      "set terminal pngcairo size 1000,450\nset output '" +
          (fs::path(a.out) / "system.png").string() +
          "'\nset datafile separator ','\nset multiplot layout 1,2 title 'Shared system prompt (" +
          Model::name() +
          ", host)'\nset grid\nset xlabel 'shared prompt tokens'\nset format x '%.0f%%'\n"
          "set xrange [0:100]\nset xtics 0,10,100\nset ylabel 'TTFT p50 (ms)'\nset logscale y\nset "
          "key top right\nplot "
          "'" +
          csv +
          "' every ::1 using ($1*100):2 with linespoints title 'caching off', '' every ::1 using "
          "($1*100):4 with linespoints title 'caching on'\nunset logscale y\n"
          "set ylabel 'tokens/s (prompt + generated)'\nset yrange [0:*]\nset key top left\nplot '" +
          csv +
          "' every ::1 using ($1*100):6 with linespoints title 'caching off', '' every ::1 using "
          "($1*100):7 with linespoints title 'caching on'\n"
          "unset multiplot\n");
}

void chat(Model& m, const sk::text::Gpt2Tokenizer& tok, const Args& a) {
  constexpr int kConv = 8, kTurns = 6, kSystem = 64, kUser = 32, kReply = 32;
  std::printf("\n== multi-turn chat: %d conversations x %d turns, each resending its history\n",
              kConv, kTurns);
  std::printf("%5s %8s %14s %14s %8s\n", "turn", "prompt", "TTFT p50 off", "TTFT p50 on", "off/on");
  std::ofstream f(fs::path(a.out) / "chat.csv");
  f << "turn,prompt_tokens,ttft_off_ms,ttft_on_ms\n";
  std::vector<double> ttft[2][kTurns];
  for (int round = 0; round < a.rounds; round++)
    for (int k = 0; k < 2; k++) {
      const int on = (round + k) % 2;
      std::mt19937_64 rng(5);
      const auto system = random_tokens(rng, kSystem);
      std::vector<std::vector<int32_t>> history(kConv, system);
      serve::EngineOptions opt{.max_batch = kConv, .max_batched_tokens = 512};
      opt.prefix_caching = on;
      serve::Engine<Model, serve::sched::Continuous> e(m, tok, opt);
      for (int t = 0; t < kTurns; t++) {
        std::vector<serve::RequestHandle> hs;
        for (auto& h : history) {
          const auto user = random_tokens(rng, kUser);
          h.insert(h.end(), user.begin(), user.end());
          serve::Request r;
          r.prompt_ids = h;
          r.stop = {.max_new_tokens = kReply, .stop_at_eos = false};
          hs.push_back(e.submit(std::move(r)));
        }
        for (int c = 0; c < kConv; c++) {
          const auto r = hs[c].get();
          ttft[on][t].push_back(r.metrics.ttft_ms);
          const auto ids = r.ids();
          history[c].insert(history[c].end(), ids.begin(), ids.end());
        }
        std::fprintf(stderr, "\r    caching %-3s turn %d/%d", on ? "on" : "off", t + 1, kTurns);
      }
      std::fprintf(stderr, "\n");
    }
  for (int t = 0; t < kTurns; t++) {
    const int prompt = kSystem + (t + 1) * kUser + t * kReply;
    const double off = percentile(ttft[0][t], 50), on = percentile(ttft[1][t], 50);
    std::printf("%5d %8d %11.0f ms %11.0f ms %7.2fx\n", t + 1, prompt, off, on, off / on);
    f << t + 1 << ',' << prompt << ',' << off << ',' << on << '\n';
  }
  f.close();
  const std::string csv = (fs::path(a.out) / "chat.csv").string();
  plot(fs::path(a.out) / "chat.gp",
       "set terminal pngcairo size 700,450\nset output '" +
           (fs::path(a.out) / "chat.png").string() +
           "'\nset datafile separator ','\nset title 'Multi-turn chat, 8 conversations (" +
           Model::name() +
           ", host)'\nset grid\nset xlabel 'turn'\nset ylabel 'TTFT p50 (ms)'\nset yrange [0:*]\n"
           "set key top left\nplot '" +
           csv +
           "' using 1:3 with linespoints title 'caching off', '' using 1:4 with "
           "linespoints title 'caching on'\n");
}

void lookup(Model& m, const sk::text::Gpt2Tokenizer& tok, const Args& a) {
  std::printf("\n== the lookup's own cost: a %d-token prompt, every full block cached\n", a.prompt);
  sk::kv::PagedCache<sk::kv::Paged<16>> c(1, 1, 2, 1024, 128);
  c.enable_prefix_cache();
  std::mt19937_64 rng(9);
  const auto p = random_tokens(rng, a.prompt);
  const int s = c.acquire();
  const sk::kv::Reserve r{s, a.prompt};
  c.reserve(std::span(&r, 1));
  c.publish(s, p, 0);
  const int n = 20000;
  int found = 0;
  const auto t0 = Clock::now();
  for (int i = 0; i < n; i++) found += c.lookup(p, 0, a.prompt - 1).tokens;
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / n;
  const auto t1 = Clock::now();
  for (int i = 0; i < n; i++) {
    const int s2 = c.acquire();
    c.map_prefix(s2, p, 0, a.prompt - 1);
    c.release(s2);
  }
  const double map_us = std::chrono::duration<double, std::micro>(Clock::now() - t1).count() / n;
  if (g_step_ms == 0) {  // without the system part: a few requests of the same prompt
    std::vector<serve::Request> rs(4);
    for (auto& x : rs) {
      x.prompt_ids = random_tokens(rng, a.prompt);
      x.stop = {.max_new_tokens = a.new_tokens, .stop_at_eos = false};
    }
    const Run run = burst(m, tok, rs, {.max_batch = 4, .max_batched_tokens = 512}, "step time");
    g_step_ms = 1000 * run.stats.busy_s / run.stats.steps;
  }
  std::printf(
      "lookup %.2f us, map + release %.2f us per request (%d tokens found); a step of these "
      "prompts: %.1f ms (the lookup: %.4f%% of it)\n",
      us, map_us, found / n, g_step_ms, g_step_ms > 0 ? 100 * us / 1000 / g_step_ms : 0);
  std::ofstream(fs::path(a.out) / "lookup.csv")
      << "prompt_tokens,lookup_us,map_release_us,step_ms\n"
      << a.prompt << ',' << us << ',' << map_us << ',' << g_step_ms << '\n';
}

void pool(Model& m, const sk::text::Gpt2Tokenizer& tok, const Args& a) {
  constexpr int kPrompts = 8, kPrefix = 128, kRequests = 48;
  std::printf(
      "\n== hit rate against the pool: %d system prompts of %d tokens (%d blocks each), "
      "%d requests in a random order, 2 at a time\n",
      kPrompts, kPrefix, kPrefix / 16, kRequests);
  std::printf("%14s %9s %10s\n", "cached blocks", "hit rate", "wall s");
  std::mt19937_64 rng(11);
  std::vector<std::vector<int32_t>> system;
  for (int i = 0; i < kPrompts; i++) system.push_back(random_tokens(rng, kPrefix));
  std::vector<serve::Request> rs(kRequests);
  for (auto& r : rs) {
    r.prompt_ids = system[rng() % kPrompts];
    const auto own = random_tokens(rng, 8);
    r.prompt_ids.insert(r.prompt_ids.end(), own.begin(), own.end());
    r.stop = {.max_new_tokens = 2, .stop_at_eos = false};
  }
  std::ofstream f(fs::path(a.out) / "pool.csv");
  f << "cached_blocks,hit_rate,seconds\n";
  for (int bound : {0, 8, 16, 32, 48, 64}) {
    serve::EngineOptions opt{.max_batch = 2, .max_batched_tokens = 512};
    opt.prefix_cache_blocks = bound;
    Run r = burst(m, tok, rs, opt, ("bound " + std::to_string(bound)).c_str());
    std::printf("%14d %8.1f%% %10.2f\n", bound, 100 * r.stats.prefix_hit_rate(), r.seconds);
    f << bound << ',' << r.stats.prefix_hit_rate() << ',' << r.seconds << '\n';
    std::fflush(stdout);
  }
  f.close();
  const std::string csv = (fs::path(a.out) / "pool.csv").string();
  plot(fs::path(a.out) / "pool.gp",
       "set terminal pngcairo size 700,450\nset output '" +
           (fs::path(a.out) / "pool.png").string() +
           "'\nset datafile separator ','\nset title 'Hit rate vs cached blocks kept (" +
           Model::name() +
           ", host)'\nset grid\nset xlabel 'cached blocks nobody holds, at most'\n"
           "set ylabel 'prompt tokens found cached'\nset format y '%.0f%%'\nset yrange [0:100]\n"
           "plot '" +
           csv + "' using 1:($2*100) with linespoints notitle\n");
}

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"servekit prefix caching benchmark"};
  app.add_option("--vocab", a.vocab, "GPT-2 vocabulary folder");
  app.add_option("--out", a.out, "folder for the CSVs and PNGs");
  app.add_option("--parts", a.parts, "comma-separated: system,chat,lookup,pool");
  app.add_option("--requests", a.requests, "system: requests")->check(CLI::Range(1, 4096));
  app.add_option("--prompt", a.prompt, "system: prompt tokens")->check(CLI::Range(2, 1000));
  app.add_option("--new", a.new_tokens, "system: new tokens")->check(CLI::Range(1, 500));
  app.add_option("--shares", a.shares, "system: shares of shared prompt tokens")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--rounds", a.rounds, "rounds (off and on each, alternating)")
      ->check(CLI::Range(1, 100));
  app.add_option("--max-batch", a.max_batch, "system: sequences at once")
      ->check(CLI::Range(1, 256));
  CLI11_PARSE(app, argc, argv);
  try {
    fs::create_directories(a.out);
    auto has = [&](const char* p) {
      return ("," + a.parts + ",").find(std::string(",") + p + ",") != std::string::npos;
    };
    auto tok = sk::text::Gpt2Tokenizer::from_dir(a.vocab);
    std::fprintf(stderr, "bench_prefix_cache: random GPT-2 124M (seed 0), %s\n",
                 Model::name().c_str());
    auto m = Model::random(0);
    if (has("system")) system_prompt(m, tok, a);
    if (has("chat")) chat(m, tok, a);
    if (has("lookup")) lookup(m, tok, a);
    if (has("pool")) pool(m, tok, a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_prefix_cache: error: %s\n", e.what());
    return 1;
  }
}
