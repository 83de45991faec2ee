// SPDX-License-Identifier: Apache-2.0
#pragma once
// The composition flags of generate, batch, serve and bench: --weights, --kv, --kv-block,
// --lora, --scheduler, --backend, with vLLM's spellings as aliases (--dtype, --quantization,
// --kv-cache-dtype, --block-size, --max-loras, --max-lora-rank). resolve() turns them into a
// composition name, checked by serve/compiled.hpp's parser and list.
#include <CLI/CLI.hpp>
#include <cstring>
#include <string>

#include "job.hpp"
#include "servekit/core/error.hpp"
#include "servekit/serve/compiled.hpp"

namespace servekit::cli {

struct CompositionFlags {
  std::string weights, dtype, quantization, kv, kv_cache_dtype, lora, scheduler, backend;
  int kv_block = 0;
  int max_loras = 0, max_lora_rank = 256;
};

// What a subcommand runs when a flag is not given.
struct CompositionDefaults {
  std::string weights = "f32", kv = "contiguous", lora = "none", scheduler = "continuous",
              backend = "host";
};

inline void add_composition_flags(CLI::App* sub, CompositionFlags& f, bool engine) {
  const std::string g = "Composition (servekit --version lists the compiled ones)";
  sub->add_option("--weights", f.weights,
                  "f32 | f16 | bf16 | u8 | u8-channel | u8-groupG | w8a8 | w8a8-groupG")
      ->group(g);
  sub->add_option("--dtype", f.dtype, "vLLM's spelling: auto | float32 | float16 | bfloat16")
      ->group(g);
  sub->add_option("--quantization", f.quantization,
                  "u8 | u8-channel | u8-groupG | w8a8 (as --weights)")
      ->group(g);
  sub->add_option("--kv", f.kv,
                  "KV cache: contiguous | paged | pagedN, each with -f16 (half) or -i8 (int8)")
      ->group(g);
  sub->add_option("--kv-block,--block-size", f.kv_block, "tokens per block of a paged cache")
      ->check(CLI::Range(1, 4096))
      ->group(g);
  sub->add_option("--kv-cache-dtype", f.kv_cache_dtype,
                  "auto | float32 | float16 | int8 (the cache's)")
      ->group(g);
  sub->add_option("--lora", f.lora, "LoRA dispatch: none | loop | gathered | segmented | merge")
      ->group(g);
  sub->add_option("--backend", f.backend, "host | emulated (CUDA kernels on the CPU) | cuda")
      ->group(g);
  if (!engine) return;
  sub->add_option("--scheduler", f.scheduler, "continuous | static | sequential")->group(g);
  sub->add_option("--max-loras", f.max_loras, "distinct adapters running at once (0: any)")
      ->check(CLI::NonNegativeNumber)
      ->group(g);
  sub->add_option("--max-lora-rank", f.max_lora_rank, "adapters of a higher rank are refused")
      ->check(CLI::Range(1, 4096))
      ->group(g);
}

namespace detail {

// One of several spellings of the same field; two that disagree are an error.
inline void take(std::string& field, const char* field_flag, const std::string& value,
                 const char* flag) {
  if (value.empty()) return;
  if (!field.empty() && field != value)
    fail(flag, " ", value, " disagrees with ", field_flag, " ", field, ": give one of them");
  field = value;
}

inline std::string dtype_to_weights(const std::string& d) {
  if (d == "auto" || d == "float32" || d == "float" || d == "fp32") return "f32";
  if (d == "float16" || d == "half" || d == "fp16") return "f16";
  if (d == "bfloat16" || d == "bf16") return "bf16";
  fail("--dtype ", d,
       ": accepted: auto, float32, float16 (half), bfloat16 (u8 weights: --weights "
       "or --quantization)");
}

// --kv-cache-dtype -> the layout's suffix: "" (fp32, or auto: the --kv name's), "-f16", "-i8".
inline std::string kv_suffix(const std::string& d) {
  if (d.empty() || d == "auto" || d == "float32" || d == "fp32" || d == "f32") return "";
  if (d == "float16" || d == "fp16" || d == "half" || d == "f16") return "-f16";
  if (d == "int8" || d == "i8") return "-i8";
  fail("--kv-cache-dtype ", d,
       ": accepted: auto, float32, float16, int8 (a scale per token and "
       "head)");
}

}  // namespace detail

// The flags over the subcommand's defaults -> the composition and the run's LoRA choices.
// any_scheduler: the subcommand runs no engine (generate), so a compiled entry with another
// scheduler serves as well as the default's.
inline RunChoice resolve(const CompositionFlags& f, const CompositionDefaults& d,
                         bool any_scheduler = false) {
  std::string w = f.weights;
  if (!f.dtype.empty()) detail::take(w, "--weights", detail::dtype_to_weights(f.dtype), "--dtype");
  detail::take(w, "--weights", f.quantization, "--quantization");
  if (w.empty()) w = d.weights;

  std::string kv = f.kv.empty() ? d.kv : f.kv;
  std::string elem;  // the element's suffix, from --kv or --kv-cache-dtype
  for (const char* x : {"-f16", "-i8"})
    if (kv.size() > std::strlen(x) && kv.ends_with(x)) elem = x, kv.resize(kv.size() - elem.size());
  if (const std::string e = detail::kv_suffix(f.kv_cache_dtype); !e.empty()) {
    if (!elem.empty() && elem != e)
      fail("--kv-cache-dtype ", f.kv_cache_dtype, " disagrees with --kv ", f.kv);
    elem = e;
  }
  if (kv == "paged")
    kv += std::to_string(f.kv_block > 0 ? f.kv_block : 16);
  else if (f.kv_block > 0) {
    if (kv == "contiguous")
      fail("--kv-block ", f.kv_block, ": a contiguous cache has no blocks (use --kv paged)");
    if (kv != "paged" + std::to_string(f.kv_block))
      fail("--kv-block ", f.kv_block, " disagrees with --kv ", f.kv);
  }
  kv += elem;

  RunChoice c;
  std::string lora = f.lora.empty() ? d.lora : f.lora;
  if (lora == "merge") c.merge = true, lora = "none";
  const std::string name = w + "/" + kv + "/" + lora + "/" +
                           (f.scheduler.empty() ? d.scheduler : f.scheduler) + "/" +
                           (f.backend.empty()    ? d.backend
                            : f.backend == "cpu" ? "host"
                            : f.backend == "gpu" ? "cuda"
                                                 : f.backend);
  const serve::Parsed p = serve::parse_composition(name);
  if (!p.ok()) {  // the field at fault, by its flag and the value given
    static constexpr const char* flags[] = {"--weights", "--kv", "--lora", "--scheduler",
                                            "--backend"};
    std::string given = name;
    for (int i = 0; i < p.bad_field && given.find('/') != std::string::npos; i++)
      given = given.substr(given.find('/') + 1);
    fail(p.bad_field < 5 ? flags[p.bad_field] : "composition", " ",
         given.substr(0, given.find('/')), ": accepted: ", serve::field_values(p.bad_field),
         p.bad_field == 2 ? ", merge" : "");
  }
  c.spec = p.spec;
  if (any_scheduler && !serve::compiled_index(c.spec))
    for (const serve::Spec& s : serve::kCompiledSpecs)
      if (serve::Spec t = s; (t.scheduler = c.spec.scheduler, t == c.spec)) {
        c.spec = s;
        break;
      }
  if (!serve::compiled_index(c.spec)) serve::fail_not_compiled(c.spec);
  c.max_loras = f.max_loras;
  c.max_lora_rank = f.max_lora_rank;
  return c;
}

}  // namespace servekit::cli
