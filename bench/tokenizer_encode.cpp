// SPDX-License-Identifier: Apache-2.0
// GPT-2 encode throughput on one thread, next to what bounds it from below.
//
// Text: the tokenizer fixture's texts (prose, code, many scripts, emoji) joined by "\n" and
// repeated to 4 MiB, the same recipe tools/make_tokenizer_fixture.py --bench times HF on.
// Rows:
//   pre-split scan   UTF-8 decode + ICU classes + the split, no BPE: the floor of any encoder
//                    built this way; encode's distance from it is the cost of BPE + cache.
//   encode, cold     a fresh tokenizer's first pass (the word cache fills as it goes)
//   encode, warm     later passes, every word already cached
//   required floor   1 MB/s
//
//   usage: bench_tokenizer_encode [gpt2_dir]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "servekit/text/tokenizer.hpp"

namespace fs = std::filesystem;
using servekit::text::Gpt2Tokenizer;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string bench_text() {
  std::ifstream in(fs::path(SERVEKIT_FIXTURES) / "tokenizer" / "cases.jsonl");
  if (!in) servekit::fail("bench: cannot open the tokenizer fixture under ", SERVEKIT_FIXTURES);
  std::string unit, line;
  for (bool first = true; std::getline(in, line); first = false) {
    if (!first) unit += '\n';
    unit += nlohmann::json::parse(line).at("text").get<std::string>();
  }
  const size_t reps = (size_t(4) << 20) / unit.size() + 1;
  std::string text;
  text.reserve(reps * (unit.size() + 1));
  for (size_t r = 0; r < reps; ++r) {
    if (r) text += '\n';
    text += unit;
  }
  return text;
}

// Best of n runs of f, in seconds.
template <class F>
double best_of(int n, F&& f) {
  double best = 1e30;
  for (int i = 0; i < n; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const fs::path dir = argc > 1 ? fs::path(argv[1]) : fs::path(SERVEKIT_DATA) / "gpt2";
  const std::string text = bench_text();
  const double mb = double(text.size()) / 1e6;

  auto t0 = std::chrono::steady_clock::now();
  const auto tok = Gpt2Tokenizer::from_dir(dir);
  const double load_s = seconds_since(t0);

  size_t pieces = 0;
  auto scan = [&] {
    pieces = 0;
    servekit::text::for_each_pretoken(text, [&](std::string_view) { ++pieces; });
  };
  scan();  // warm-up: page in the text, ICU's tables
  const double scan_s = best_of(3, scan);

  t0 = std::chrono::steady_clock::now();
  const auto ids = tok.encode(text);
  const double cold_s = seconds_since(t0);
  size_t n_ids = 0;
  const double warm_s = best_of(3, [&] { n_ids = tok.encode(text).size(); });
  if (n_ids != ids.size())
    servekit::fail("bench: warm pass gave ", n_ids, " ids, cold ", ids.size());

  std::printf("GPT-2 tokenizer encode, one thread (%s, compiled by g++ %s)\n", dir.c_str(),
              __VERSION__);
  std::printf("  text: %.2f MB, %zu pre-tokens, %zu ids (%.2f bytes/id), %zu words cached\n", mb,
              pieces, ids.size(), double(text.size()) / double(ids.size()), tok.cached_words());
  std::printf("  vocabulary load: %.0f ms\n", load_s * 1e3);
  std::printf("  %-18s %9s %14s\n", "", "MB/s", "x floor");
  auto row = [&](const char* name, double s) {
    std::printf("  %-18s %9.2f %14.1f\n", name, mb / s, mb / s / 1.0);
  };
  row("pre-split scan", scan_s);
  row("encode, cold", cold_s);
  row("encode, warm", warm_s);
  std::printf("  %-18s %9.2f\n", "required floor", 1.0);
  std::printf("  encode (warm) runs at %.0f%% of the pre-split scan's speed\n",
              100.0 * scan_s / warm_s);
  return 0;
}
