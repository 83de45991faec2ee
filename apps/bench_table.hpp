// SPDX-License-Identifier: Apache-2.0
#pragma once
// `servekit bench`: "swap a policy, compare" from the command line. --compare AXIS=V1,V2,...
// names the compositions (the other axes from the flags); every round runs each composition
// at each batch size in turn, so that a machine's drift touches them alike; the medians over the
// rounds go to a table, a CSV and a PNG beside it. --rate makes the workload arrivals over time
// (apps/bench.hpp), the one where scheduler=... differ.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "composition_flags.hpp"
#include "job.hpp"

namespace servekit::cli {

// The compositions --compare names, each resolved as the flags with that one axis changed.
inline std::vector<RunChoice> compared(const BenchArgs& be, const CompositionFlags& base,
                                       const CompositionDefaults& d) {
  if (be.compare.empty()) return {resolve(base, d)};
  const auto eq = be.compare.find('=');
  const std::string axis = be.compare.substr(0, eq);
  if (eq == std::string::npos || eq + 1 == be.compare.size())
    fail("--compare ", be.compare,
         ": expected AXIS=V1,V2,... (AXIS: weights, kv, lora, "
         "scheduler or backend)");
  std::vector<RunChoice> out;
  std::string rest = be.compare.substr(eq + 1);
  for (std::size_t start = 0; start <= rest.size();) {
    const std::size_t comma = std::min(rest.find(',', start), rest.size());
    const std::string v = rest.substr(start, comma - start);
    start = comma + 1;
    if (v.empty()) fail("--compare ", be.compare, ": an empty value");
    CompositionFlags f = base;
    if (axis == "weights")
      f.weights = v, f.dtype.clear(), f.quantization.clear();
    else if (axis == "kv")
      f.kv = v, f.kv_block = 0, f.kv_cache_dtype.clear();
    else if (axis == "lora")
      f.lora = v;
    else if (axis == "scheduler")
      f.scheduler = v;
    else if (axis == "backend")
      f.backend = v;
    else
      fail("--compare ", be.compare, ": unknown axis '", axis,
           "' (weights, kv, lora, scheduler or backend)");
    out.push_back(resolve(f, d));
    if (out.back().merge) fail("--compare: lora=merge has no adapter to merge in a bench");
  }
  return out;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

using SessionMaker = std::function<std::unique_ptr<BenchSession>(const RunChoice&)>;

inline int run_bench(const BenchArgs& be, const CompositionFlags& flags, const SessionMaker& make) {
  const auto choices = compared(be, flags, {.lora = be.adapters > 0 ? "gathered" : "none"});
  std::vector<std::string> names;
  std::vector<std::unique_ptr<BenchSession>> sessions;
  for (const auto& c : choices) {
    names.push_back(serve::spec_name(c.spec));
    std::fprintf(stderr, "bench: loading %s\n", names.back().c_str());
    sessions.push_back(make(c));
    sessions.back()->measure(be.batches.front());  // warm-up: first-touch pages, caches
  }
  const std::size_t n = sessions.size(), nb = be.batches.size();
  std::vector<std::vector<BenchRow>> rows(n * nb);  // [composition * nb + batch][round]
  const int total = static_cast<int>(be.rounds * n * nb);
  int done = 0;
  for (int r = 0; r < be.rounds; r++)
    for (std::size_t b = 0; b < nb; b++)
      for (std::size_t k = 0; k < n; k++) {
        rows[k * nb + b].push_back(sessions[k]->measure(be.batches[b]));
        const int w = 40, fill = ++done * w / total;
        std::fprintf(stderr, "\r[%s%s] %d/%d  round %d, batch %d, %s          ",
                     std::string(fill, '#').c_str(), std::string(w - fill, '.').c_str(), done,
                     total, r + 1, be.batches[b], names[k].c_str());
      }
  std::fprintf(stderr, "\n");

  auto med = [&](std::size_t i, double BenchRow::*f) {
    std::vector<double> v;
    for (const auto& row : rows[i]) v.push_back(row.*f);
    return median(v);
  };
  const std::string csv_path = be.out + ".csv";
  std::ofstream csv(csv_path);
  if (!csv) fail("bench: cannot write ", csv_path);
  csv << "composition,batch,prefill_tok_s,decode_tok_s,ttft_p50_ms,ttft_p99_ms,tpot_p50_ms,"
         "tpot_p99_ms,weights_mib,kv_mib\n";
  if (be.rate > 0)
    std::printf(
        "%d requests arriving at %g/s (Poisson), prompts of %d..%d tokens, %d..%d new tokens, "
        "medians of %d rounds; batch: the engine's max batch; prefill/s and decode/s: every "
        "prompt and generated token over the whole run; x: decode/s over the first "
        "composition's at the same batch\n",
        be.requests, be.rate, std::max(1, be.prompt / 4), be.prompt, std::max(2, be.new_tokens / 4),
        be.new_tokens, be.rounds);
  else
    std::printf(
        "%d-token prompts, %d new tokens, medians of %d rounds; x: decode tokens/s over "
        "the first composition's at the same batch\n",
        be.prompt, be.new_tokens, be.rounds);
  std::printf("%-48s %5s %10s %10s %6s %9s %9s %9s %9s %9s %9s\n", "composition", "batch",
              "prefill/s", "decode/s", "x", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99",
              "weights", "KV MiB");
  for (std::size_t b = 0; b < nb; b++)
    for (std::size_t k = 0; k < n; k++) {
      const std::size_t i = k * nb + b;
      const double dec = med(i, &BenchRow::decode_tok_s), dec0 = med(b, &BenchRow::decode_tok_s);
      std::printf("%-48s %5d %10.1f %10.1f %6.2f %9.2f %9.2f %9.2f %9.2f %9.1f %9.1f\n",
                  names[k].c_str(), be.batches[b], med(i, &BenchRow::prefill_tok_s), dec,
                  dec0 > 0 ? dec / dec0 : 0, med(i, &BenchRow::ttft_p50_ms),
                  med(i, &BenchRow::ttft_p99_ms), med(i, &BenchRow::tpot_p50_ms),
                  med(i, &BenchRow::tpot_p99_ms), med(i, &BenchRow::weight_mib),
                  med(i, &BenchRow::kv_mib));
    }
  // One composition's rows together, so that the plot's lines join its points.
  for (std::size_t k = 0; k < n; k++)
    for (std::size_t b = 0; b < nb; b++) {
      const std::size_t i = k * nb + b;
      csv << names[k] << "," << be.batches[b];
      for (auto f : {&BenchRow::prefill_tok_s, &BenchRow::decode_tok_s, &BenchRow::ttft_p50_ms,
                     &BenchRow::ttft_p99_ms, &BenchRow::tpot_p50_ms, &BenchRow::tpot_p99_ms,
                     &BenchRow::weight_mib, &BenchRow::kv_mib})
        csv << "," << med(i, f);
      csv << "\n";
    }
  csv.close();
  // Decode and prefill tokens/s against the batch size, one line per composition.
  std::string plot =
      "set datafile separator ','\nset terminal pngcairo size 1200,500\n"
      "set output '" +
      be.out +
      ".png'\nset multiplot layout 1,2\n"
      "set key top left\nset logscale x 2\nset xlabel 'batch'\n";
  for (const char* what : {"decode", "prefill"}) {
    plot += std::string("set title '") + what + " tokens/s'\nplot ";
    for (std::size_t k = 0; k < n; k++)
      plot += (k ? ", " : "") + std::string("'") + csv_path + "' using 2:(strcol(1) eq '" +
              names[k] + "' ? $" + (what[0] == 'd' ? "4" : "3") +
              " : 1/0) with linespoints title '" + names[k] + "'";
    plot += "\n";
  }
  plot += "unset multiplot\n";
  const std::string script = be.out + ".gnuplot";
  std::ofstream(script) << plot;
  if (std::system(("gnuplot '" + script + "' 2>/dev/null").c_str()) != 0)
    std::fprintf(stderr, "bench: gnuplot missing or failed: no plot (the CSV has the data)\n");
  std::fprintf(stderr, "bench: wrote %s and %s.png\n", csv_path.c_str(), be.out.c_str());
  return 0;
}

}  // namespace servekit::cli
