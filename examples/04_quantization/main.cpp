// SPDX-License-Identifier: Apache-2.0
// Lesson 4: quantization.
//
// Storing weights in fewer bits shrinks the model, and a decode step, which must read every
// weight once, gets proportionally cheaper. The course maps each tensor's [min, max] onto
// uint8 with a zero point:
//   scale = (max - min) / 255, q = uint8(clamp((w - min) / scale, 0, 255)), w' = q scale + min
// This example runs the same model in fp32, fp16, bf16 and zero-point uint8 per tensor (the
// course's), per output channel and per group of 64 input rows, and shows:
//   0. one weight matrix's corner before and after quantize -> dequantize, and the error;
//   1. the footprint of each, and the course's get_memory_footprint() numbers rebuilt from it;
//   2. the quantization error per tensor |w - w'| (max and mean) of each format;
//   3. the greedy continuation of the course's prompts in fp32 beside each format;
//   4. formats.csv and formats.png: footprint and error per format;
//   5. the KV cache in fp32, f16 and int8 (a scale per token and head): bytes per cached token,
//      the error of layer 0's keys and values, the prompt's logits, the greedy continuations
//      (kv_caches.csv).
// With --model DIR it uses a Hugging Face GPT-2; without, a seeded random GPT-2 124M (same
// sizes, meaningless text; random weights have no outliers, so errors look kinder than real).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "common/plot.hpp"
#include "common/run.hpp"
#include "servekit/model/dispatch.hpp"
#include "servekit/model/footprint.hpp"
#include "servekit/model/gpt2.hpp"
#include "servekit/model/quant_report.hpp"
#include "servekit/kernels/ref/attention.hpp"
#include "servekit/serve/generate.hpp"
#include "servekit/text/tokenizer.hpp"

namespace fs = std::filesystem;
namespace sk = servekit;

struct Args {
  std::string model, vocab, out = "out/04_quantization";
  std::vector<std::string> prompts{"The quick brown fox jumped over the", "The rain in Spain falls",
                                   "What comes up must", "Quick brown fox jumped on"};
  int tokens = 10;
};

struct Row {
  std::string format;
  sk::Footprint fp;
  double max_err = 0, mean_err = 0, emb_max_err = 0;
  double logit_err = 0;  // max |logit - fp32's| over the first prompt's positions
  int same_prompts = 0;
};

double mib(std::size_t b) {
  return b / 1048576.0;
}

// The corner of one weight matrix that every format is shown on: h.0.attn.c_attn.weight, HF's
// (in, out) layout, rows 0..2 and columns 0..4.
constexpr int kCornerRows = 3, kCornerCols = 5;

void print_corner(const char* what, auto value) {
  std::printf("  %-24s", what);
  for (int k = 0; k < kCornerRows; k++) {
    std::printf(k ? "\n  %-24s[" : "[", "");
    for (int n = 0; n < kCornerCols; n++) std::printf(" %+.6f", value(k, n));
    std::printf(" ]");
  }
  std::printf("\n");
}

// What quantize -> dequantize does to the corner's numbers in format F.
template <class F>
void show_corner(const sk::model::Gpt2Tensors& t) {
  const int C = t.config.n_embd;
  const auto& w = t.layers[0].attn_w;  // (C, 3C)
  const auto m = sk::weights::Matrix<F>::from_f32(w, C, 3 * C, "h.0.attn.c_attn.weight");
  const auto orig = [&](int k, int n) { return w[static_cast<std::size_t>(k) * 3 * C + n]; };
  std::printf("h.0.attn.c_attn.weight [%d, %d], corner [0:%d, 0:%d]:\n", C, 3 * C, kCornerRows,
              kCornerCols);
  print_corner("fp32", orig);
  print_corner(("-> " + std::string(F::name) + " -> fp32").c_str(),
               [&](int k, int n) { return m.dequant(k, n); });
  print_corner("error", [&](int k, int n) { return m.dequant(k, n) - orig(k, n); });
}

// The first prompt's logits at every position, in a fresh slot 0 of cache.
template <class D, class Model, class Cache>
std::vector<float> prompt_logits(Model& model, Cache& cache, const Args& a,
                                 const sk::text::Gpt2Tokenizer& tok) {
  auto ids = tok.encode(a.prompts[0]);
  for (auto& id : ids) id %= D::vocab;
  const sk::model::SeqStep s{0, 0, static_cast<int>(ids.size())};
  std::vector<float> logits;
  model.forward(cache, {ids, std::span(&s, 1), sk::model::Logits::All}, logits);
  return logits;
}

template <class D, class F>
Row run_format(const Args& a, const sk::model::Gpt2Tensors& t, const sk::text::Gpt2Tokenizer& tok,
               std::vector<std::vector<int32_t>>& fp32_ids, std::vector<float>& fp32_logits) {
  using Model = sk::Gpt2<sk::Config<D, F>>;
  std::printf("\n=== %s ===\n", std::string(F::name).c_str());
  std::fflush(stdout);
  Model model(t);  // quantized at load from the fp32 tensors
  auto cache = model.make_cache(1);
  Row r{std::string(F::name), sk::footprint(model, &cache)};
  r.fp.print();
  show_corner<F>(t);

  // Quantization error per tensor, summarised: the worst matrix, the mean over matrices.
  auto errs = sk::quant_report<F>(t);
  int n = 0;
  const sk::TensorError* worst = nullptr;
  for (const auto& e : errs) {
    if (!e.in_model) {
      r.emb_max_err = std::max(r.emb_max_err, e.max_abs);
      continue;
    }
    if (!worst || e.max_abs > worst->max_abs) worst = &e;
    r.max_err = std::max(r.max_err, e.max_abs);
    r.mean_err += e.mean_abs, n++;
  }
  r.mean_err /= n;
  std::printf(
      "quantization error |w - w'| over %d linear matrices: max %.3g (%s, range %.3g),"
      " mean %.3g\n",
      n, r.max_err, worst->name.c_str(), worst->range, r.mean_err);
  for (const auto& e : errs)
    if (!e.in_model)
      std::printf(
          "  %s if quantized like the course (fp32 for the lookup here): max %.3g, mean %.3g\n",
          e.name.c_str(), e.max_abs, e.mean_abs);

  // How far the first prompt's logits move (W8A8 also rounds every linear's input).
  {
    const auto logits = prompt_logits<D>(model, cache, a, tok);
    if (fp32_logits.empty()) fp32_logits = logits;
    for (std::size_t i = 0; i < logits.size(); i++)
      r.logit_err = std::max(r.logit_err, double(std::fabs(logits[i] - fp32_logits[i])));
    std::printf("max |logit - fp32's| over the first prompt's %zu positions: %.3g\n",
                logits.size() / D::vocab, r.logit_err);
    cache = model.make_cache(1);
  }

  // Greedy continuations of the course's prompts.
  sk::serve::GenerateOptions opt;
  opt.stop.max_new_tokens = a.tokens;
  opt.stop.stop_at_eos = false;
  for (std::size_t i = 0; i < a.prompts.size(); i++) {
    auto g = sk::serve::generate(model, tok, tok.encode(a.prompts[i]), opt);
    const bool first = fp32_ids.size() <= i;
    if (first) fp32_ids.push_back(g.ids());
    const bool same = g.ids() == fp32_ids[i];
    r.same_prompts += same;
    int agree = 0;
    while (agree < static_cast<int>(g.ids().size()) && g.ids()[agree] == fp32_ids[i][agree])
      agree++;
    std::printf("  %-38s -> %s%s\n", ("\"" + a.prompts[i] + "\"").c_str(), g.text.c_str(),
                first  ? ""
                : same ? "   [= fp32]"
                       : ("   [first " + std::to_string(agree) + " tokens = fp32]").c_str());
  }
  return r;
}

// The KV cache in fewer bits (kv::ContiguousF16, kv::ContiguousI8), fp32 weights: what a
// cached token costs, how far layer 0's keys and values land from the fp32 cache's (its inputs
// are the same in both: the error is the cache's own), how far the prompt's logits move, and
// whether the greedy continuations stay fp32's.
struct KvRow {
  std::string cache;
  std::size_t bytes_per_token = 0;
  double k_err = 0, v_err = 0, k_range = 0, logit_err = 0;
  int same_prompts = 0;
};

// Layer 0's first n K (or V) rows of slot 0 as floats, whatever the element type.
template <class Cache>
std::vector<float> layer0(Cache& cache, int n, int C, bool value) {
  auto v = cache.view(0);
  std::vector<float> out(static_cast<std::size_t>(n) * C);
  for (int t = 0; t < n; t++)
    for (int c = 0; c < C; c++) {
      const int64_t at = v.offset(0, t) + c;
      const auto x = (value ? v.v : v.k)[at];
      out[static_cast<std::size_t>(t) * C + c] =
          sk::kernels::ref::load_f32(x) * sk::kernels::ref::kv_scale(v, at, value);
    }
  return out;
}

// F other than fp32: the cache with those weights (W8A8 + int8: every operand in 8 bits).
template <class D, class Kv, class F = sk::weights::F32>
KvRow run_cache(const Args& a, const sk::model::Gpt2Tensors& t, const sk::text::Gpt2Tokenizer& tok,
                const std::vector<std::vector<int32_t>>& fp32_ids, std::vector<float>& f32_kv,
                std::vector<float>& f32_logits) {
  using Model = sk::Gpt2<sk::Config<D, F, Kv>>;
  constexpr int C = D::n_embd;
  Model model(t);
  auto cache = model.make_cache(1);
  const bool f32 = std::is_same_v<F, sk::weights::F32>;
  KvRow r{(f32 ? "" : std::string(F::name) + " + ") + std::string(Kv::name),
          cache.bytes_per_token()};
  // The first prompt, every position's logits (each reads the cache rows before it).
  const auto logits = prompt_logits<D>(model, cache, a, tok);
  const int n = static_cast<int>(logits.size() / D::vocab);
  std::vector<float> kv = layer0(cache, n, C, false);
  const auto vv = layer0(cache, n, C, true);
  kv.insert(kv.end(), vv.begin(), vv.end());
  if (f32_kv.empty()) f32_kv = kv, f32_logits = logits;
  const std::size_t half = kv.size() / 2;
  for (std::size_t i = 0; i < kv.size(); i++) {
    const double e = std::fabs(kv[i] - f32_kv[i]);
    (i < half ? r.k_err : r.v_err) = std::max(i < half ? r.k_err : r.v_err, e);
    if (i < half) r.k_range = std::max(r.k_range, std::fabs(double(f32_kv[i])));
  }
  for (std::size_t i = 0; i < logits.size(); i++)
    r.logit_err = std::max(r.logit_err, double(std::fabs(logits[i] - f32_logits[i])));
  sk::serve::GenerateOptions opt;
  opt.stop.max_new_tokens = a.tokens;
  opt.stop.stop_at_eos = false;
  for (std::size_t i = 0; i < a.prompts.size(); i++)
    r.same_prompts +=
        sk::serve::generate(model, tok, tok.encode(a.prompts[i]), opt).ids() == fp32_ids[i];
  return r;
}

template <class D>
int lesson(const Args& a, const sk::text::Gpt2Tokenizer& tok) {
  std::printf("loading %s ...\n", a.model.empty() ? "random GPT-2 124M (seed 0)" : a.model.c_str());
  const auto t = a.model.empty() ? sk::model::random_gpt2<D>(0) : sk::model::load_gpt2<D>(a.model);
  std::vector<std::vector<int32_t>> fp32_ids;
  std::vector<float> fp32_logits;
  std::vector<Row> rows;
  std::apply(
      [&]<class... F>(F...) {
        (rows.push_back(run_format<D, F>(a, t, tok, fp32_ids, fp32_logits)), ...);
      },
      sk::weights::AllFormats{});

  // The course's numbers: HF's get_memory_footprint() counts every parameter in its dtype plus
  // the attention mask buffers; the quantization state is kept outside the model.
  const auto& f32 = rows[0].fp;
  std::printf("\n=== footprint summary (MiB) ===\n");
  std::printf("%-14s %12s %12s %12s %12s %14s %14s %13s %7s\n", "format", "servekit", "linears",
              "lm_head", "state", "course-style", "vs fp32", "max |dlogit|", "greedy");
  for (const auto& r : rows)
    std::printf("%-14s %12.2f %12.2f %12.2f %12.3f %14.2f %13.2fx %13.3g %5d/%zu\n",
                r.format.c_str(), mib(r.fp.weights()), mib(r.fp.linear), mib(r.fp.lm_head),
                mib(r.fp.quant_state), mib(r.fp.course_bytes()),
                double(f32.weights()) / r.fp.weights(), r.logit_err, r.same_prompts,
                a.prompts.size());
  std::printf(
      "\ncourse-style = every parameter (%lld) in the format + HF's mask buffers (%.2f MiB:\n"
      "a bool (1,1,%d,%d) causal mask and a 4-byte masked_bias per layer). For GPT-2 the course\n"
      "prints 486.70 MiB for fp32 and 130.68 MiB after quantize_model (uint8, per tensor).\n"
      "servekit keeps wte/wpe (%.2f MiB) in fp32 for the input lookup and no mask buffers;\n"
      "it quantizes the linear layers and a copy of the tied lm_head (wte^T), which every step\n"
      "reads whole. The course-style column is the all-weights figure. max |dlogit|: the first\n"
      "prompt's logits against fp32's; greedy: prompts whose continuations equal fp32's. W8A8\n"
      "also rounds each linear's input row to int8, which the weight error above does not show.\n",
      static_cast<long long>(f32.params), mib(f32.hf_buffers), D::n_positions, D::n_positions,
      mib(f32.embeddings));

  // 5. The KV cache in fewer bits, fp32 weights.
  std::printf("\n=== the KV cache in fewer bits (fp32 weights; prompt \"%s\") ===\n",
              a.prompts[0].c_str());
  std::vector<float> f32_kv, f32_logits;
  std::vector<KvRow> caches = {
      run_cache<D, sk::kv::Contiguous>(a, t, tok, fp32_ids, f32_kv, f32_logits),
      run_cache<D, sk::kv::ContiguousF16>(a, t, tok, fp32_ids, f32_kv, f32_logits),
      run_cache<D, sk::kv::ContiguousI8>(a, t, tok, fp32_ids, f32_kv, f32_logits),
      run_cache<D, sk::kv::ContiguousI8, sk::weights::W8A8<sk::weights::PerChannel>>(
          a, t, tok, fp32_ids, f32_kv, f32_logits)};
  std::printf("%-32s %10s %12s %9s %14s %14s %14s %9s\n", "cache", "B/token", "MiB/1k tok",
              "vs fp32", "layer-0 K err", "layer-0 V err", "max |dlogit|", "greedy");
  for (const auto& c : caches)
    std::printf("%-32s %10zu %12.2f %8.2fx %14.3g %14.3g %14.3g %6d/%zu\n", c.cache.c_str(),
                c.bytes_per_token, c.bytes_per_token * 1024 / 1048576.0,
                double(caches[0].bytes_per_token) / c.bytes_per_token, c.k_err, c.v_err,
                c.logit_err, c.same_prompts, a.prompts.size());
  std::printf(
      "(errors against the fp32 cache; layer 0's keys span |k| <= %.3g. int8: a scale per token\n"
      "and head, max |x| / 127, so a key is off by at most half of its head's step; greedy: the\n"
      "prompts whose %d tokens equal fp32 weights with an fp32 cache; the last row also has\n"
      "W8A8 weights and activations, so its errors are all of them together)\n",
      caches[0].k_range, a.tokens);

  // CSV + plot.
  fs::create_directories(a.out);
  {
    std::ofstream kvf(fs::path(a.out) / "kv_caches.csv");
    kvf << "cache,bytes_per_token,k_err,v_err,max_dlogit,prompts_same_as_fp32\n";
    for (const auto& c : caches)
      kvf << c.cache << ',' << c.bytes_per_token << ',' << c.k_err << ',' << c.v_err << ','
          << c.logit_err << ',' << c.same_prompts << '\n';
  }
  const fs::path csv = fs::path(a.out) / "formats.csv";
  std::ofstream f(csv);
  f << "format,weights_mib,linear_mib,state_mib,course_style_mib,max_abs_err,mean_abs_err,"
       "prompts_same_as_fp32,max_dlogit\n";
  for (const auto& r : rows)
    f << r.format << ',' << mib(r.fp.weights()) << ',' << mib(r.fp.linear) << ','
      << mib(r.fp.quant_state) << ',' << mib(r.fp.course_bytes()) << ',' << r.max_err << ','
      << r.mean_err << ',' << r.same_prompts << ',' << r.logit_err << '\n';
  f.close();
  const fs::path png = fs::path(a.out) / "formats.png";
  sk::examples::gnuplot(
      fs::path(a.out) / "formats.gp",
      "set terminal pngcairo size 1100,480\nset output '" + png.string() +
          "'\nset datafile separator ','\nset style data histograms\n"
          "set style histogram clustered\nset style fill solid 0.8 border -1\n"
          "set xtics rotate by -30\nset grid ytics\nset multiplot layout 1,2 title '" +
          std::string(D::name) +
          ": weight formats'\n"
          "set title 'footprint (MiB)'\nset key below\nset yrange [0:*]\n"
          "plot '" +
          csv.string() +
          "' every ::1 using 2:xtic(1) title 'servekit weights', "
          "'' every ::1 using 5 title 'course-style (all params + HF buffers)'\n"
          "set title 'quantization error of the linear weights'\nset logscale y\n"
          "set yrange [*:*]\nset key below noenhanced\n"
          "plot '' every ::1 using ($6 > 0 ? $6 : 1e-9):xtic(1) title \"max abs(w - dequant(w))\", "
          "'' every ::1 using ($7 > 0 ? $7 : 1e-9) title \"mean abs(w - dequant(w))\"\n"
          "unset multiplot\n");
  std::printf("wrote %s and %s\n", csv.c_str(), png.c_str());
  return 0;
}

int main(int argc, char** argv) {
  CLI::App app{"Lesson 4: quantization"};
  Args a;
  sk::examples::add_model_options(app, a.model, a.vocab);
  app.add_option("--prompt", a.prompts, "prompts (default: the course's)");
  app.add_option("--tokens", a.tokens, "tokens to generate per prompt")->check(CLI::Range(1, 256));
  app.add_option("--out", a.out, "output folder for the CSV and plot");
  CLI11_PARSE(app, argc, argv);
  return sk::examples::run_lesson(
      "04_quantization", a.model, a.vocab,
      [&]<class D>(std::type_identity<D>, const sk::text::Gpt2Tokenizer& tok) {
        return lesson<D>(a, tok);
      });
}
