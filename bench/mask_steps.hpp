// SPDX-License-Identifier: Apache-2.0
#pragma once
// Masks off the critical path, measured: `batch` sequences decode step after step, picking on
// the device, (a) unconstrained, (b) each row under a JSON schema with its token mask made
// before the step is launched, (c) the same with the masks made while the step's forward runs
// (Batch::late_masks, what the engine does). Every step of the three has the same rows; the
// runs take turns, round after round, and each round compiles its grammars afresh, so the masks
// are cold the first time each state is seen, as a server's are. A row whose document is
// complete starts another. Printed: each run's step time (median and p90) and the host's time
// making the masks per step, beside the unconstrained step; masks.csv and masks.png in --out.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common.hpp"
#include "schemas.hpp"
#include "servekit/constrain/grammar.hpp"
#include "servekit/constrain/token_mask.hpp"
#include "servekit/model/batch.hpp"
#include "servekit/text/gpt2_tokenizer.hpp"

namespace servekit::bench {

struct MaskRun {
  std::vector<double> step_ms;  // each timed step, masks included
  double mask_ms = 0;           // the host's time making masks, per step
};

// One run of `steps` decode steps of `batch` rows: masks 0 (none), 1 (before) or 2 (during).
template <class M>
MaskRun mask_run(M& m, const text::Gpt2Tokenizer& tok, int batch, int steps, int mode,
                 const std::vector<std::shared_ptr<const constrain::Grammar>>& gs, uint64_t seed) {
  constexpr int V = M::Dims::vocab, W = (V + 31) / 32, kPrompt = 8, kWarm = 2;
  const auto vocab = constrain::Vocab::of(tok, V, tok.eos_id());
  auto cache = m.make_cache(batch, kPrompt + steps + 1);
  std::vector<std::unique_ptr<constrain::Constraint>> cons(batch);
  auto fresh = [&](int i) {
    if (mode > 0) cons[i] = std::make_unique<constrain::Constraint>(gs[i % gs.size()], vocab);
  };
  std::vector<RowSampling> rows(batch);
  std::vector<model::SeqStep> seqs(batch);
  std::vector<int32_t> tokens, ids(batch);
  std::vector<float> lp(batch);
  std::vector<uint32_t> masks(mode > 0 ? static_cast<std::size_t>(batch) * W : 0);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < batch; i++) {
    seqs[i] = {i, 0, kPrompt};
    for (int t = 0; t < kPrompt; t++) tokens.push_back(static_cast<int32_t>(rng() % 50000));
    rows[i] = {.seed = seed + i, .index = 0, .temperature = 1.f};
    fresh(i);
  }
  m.forward_pick(cache, {tokens, seqs, model::Logits::Last, {}, rows}, ids, lp);  // prompts
  double mask_s = 0;
  auto write = [&] {
    const double t0 = now_s();
    for (int i = 0; i < batch; i++)
      std::copy_n(cons[i]->mask(1 << 20).data(), W, masks.data() + std::size_t(i) * W);
    mask_s += now_s() - t0;
  };
  MaskRun out;
  for (int t = 0; t < steps; t++) {
    for (int i = 0; i < batch; i++) {
      if (mode > 0) rows[i].mask = i;
      seqs[i] = {i, kPrompt + t, 1};
      rows[i].index = static_cast<uint64_t>(t + 1);
    }
    tokens.assign(ids.begin(), ids.end());
    if (t == 0 && mode > 0) {  // the prompt's pick was unmasked: start from the grammar's
      write();
      for (int i = 0; i < batch; i++) {  // first allowed token, so every step is constrained
        const uint32_t* w = masks.data() + std::size_t(i) * W;
        int v = 0;
        while (!(w[v >> 5] >> (v & 31) & 1)) v++;
        tokens[i] = v;
        cons[i]->advance(v, tok.token_view(v));
      }
      mask_s = 0;
    }
    model::Batch b{tokens, seqs, model::Logits::Last, {}, rows, masks};
    const double t0 = now_s();
    if (mode == 1) write();
    if (mode == 2) b.late_masks = model::MaskWriter::of(write);
    m.forward_pick(cache, b, ids, lp);
    if (t >= kWarm) out.step_ms.push_back(1e3 * (now_s() - t0));
    if (t == kWarm - 1) mask_s = 0;
    if (mode == 0) continue;
    for (int i = 0; i < batch; i++) {
      const int32_t id = ids[i];
      cons[i]->advance(id, id == tok.eos_id() ? std::string_view() : tok.token_view(id));
      if (id == tok.eos_id() || cons[i]->complete()) fresh(i);
    }
  }
  out.mask_ms = 1e3 * mask_s / std::max<std::size_t>(1, out.step_ms.size());
  return out;
}

// The three runs, `rounds` times in turn; prints and writes masks.csv / masks.png into out.
template <class M>
void mask_steps(M& m, const text::Gpt2Tokenizer& tok, int batch, int steps, int rounds,
                const std::filesystem::path& out, const std::string& where) {
  std::printf("\n== token masks: %d rows a step, %d decode steps, %d rounds (ms a step)\n", batch,
              steps, rounds);
  const char* names[] = {"unconstrained", "masks before the forward", "masks during the forward"};
  std::vector<double> all[3], mask_ms[3];
  for (int r = 0; r < rounds; r++) {
    std::vector<std::shared_ptr<const constrain::Grammar>> gs;
    for (const char* s : kSchemas)
      gs.push_back(constrain::compile_json_schema(std::string_view(s)));
    std::vector<std::shared_ptr<const constrain::Grammar>> again;  // the same, compiled anew
    for (const char* s : kSchemas)
      again.push_back(constrain::compile_json_schema(std::string_view(s)));
    for (int k = 0; k < 3; k++) {
      const int mode = (k + r) % 3;  // who goes first changes each round
      std::fprintf(stderr, "\r    round %d/%d: %-26s", r + 1, rounds, names[mode]);
      const MaskRun run = mask_run(m, tok, batch, steps, mode, mode == 2 ? again : gs, 7 + r);
      all[mode].insert(all[mode].end(), run.step_ms.begin(), run.step_ms.end());
      mask_ms[mode].push_back(run.mask_ms);
    }
  }
  std::fprintf(stderr, "\n");
  const double base = percentile(all[0], 50);
  std::printf("%-26s %9s %9s %16s %14s\n", "run", "p50", "p90", "masks a step", "p50 / none");
  std::ofstream f(out / "masks.csv");
  f << "run,p50_ms,p90_ms,mask_ms_per_step,vs_unconstrained\n";
  for (int k = 0; k < 3; k++) {
    const double p50 = percentile(all[k], 50), p90 = percentile(all[k], 90);
    const double mk = percentile(mask_ms[k], 50);
    std::printf("%-26s %9.3f %9.3f %16.3f %13.3fx\n", names[k], p50, p90, mk, p50 / base);
    f << '"' << names[k] << "\"," << p50 << ',' << p90 << ',' << mk << ',' << p50 / base << '\n';
  }
  f.close();
  plot(out / "masks.gp",
       "set terminal pngcairo size 900,450\nset output '" + (out / "masks.png").string() +
           "'\nset datafile separator ','\nset style data histograms\nset style histogram "
           "clustered\nset style fill solid 0.8\nset grid y\nset yrange [0:*]\nset key below\n"
           "set xtics rotate by -10\nset title "
           "'A decode step of " +
           std::to_string(batch) + " rows with token masks (" + where +
           ")'\nset ylabel 'ms a step'\nplot '" + (out / "masks.csv").string() +
           "' every ::1 using 2:xtic(1) title 'p50', '' every ::1 using 3 title 'p90', '' every "
           "::1 using 4 title 'making the masks'\n");
}

}  // namespace servekit::bench
