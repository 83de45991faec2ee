// SPDX-License-Identifier: Apache-2.0
#pragma once
// --speculative and vLLM's --speculative-config, for generate, batch and serve: the engine's
// n-gram speculation (serve/ngram_proposer.hpp) or a draft model (serve/draft_model.hpp,
// apps/draft_loader.hpp) from the command line.
//
//   --speculative ngram            k = 4 proposed tokens, suffixes of 3 down to 1 token
//   --speculative ngram:N,K        suffixes of N down to 1 token, K proposed tokens
//   --speculative draft:DIR[:K]    the model in DIR proposes K tokens (4)
//   --speculative-config '{"method": "ngram", "num_speculative_tokens": 4,
//                          "prompt_lookup_max": 3, "prompt_lookup_min": 1, "rule": "cost"}'
//   --speculative-config '{"method": "draft_model", "model": DIR, "num_speculative_tokens": 4}'
// rule (servekit's own field): "cost" (the default: a sequence proposes only while its
// acceptance makes the step's time per token fall, by the engine's measured step cost) or
// "always".
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_common.hpp"
#include "draft_loader.hpp"
#include "servekit/serve/ngram_proposer.hpp"

namespace servekit::cli {

struct SpeculativeFlags {
  std::string spec, config;
};

inline void add_speculative_flags(CLI::App* sub, SpeculativeFlags& f) {
  sub->add_option("--speculative", f.spec,
                  "speculative decoding: ngram (prompt lookup: 4 tokens proposed per step), "
                  "ngram:N,K (suffixes of N tokens down to 1, K proposed) or draft:DIR[:K] (the "
                  "model in DIR, f32 on the host, proposes K tokens, 4 by default); the tokens "
                  "are those of plain decoding. Default: none");
  sub->add_option("--speculative-config", f.config,
                  "vLLM's JSON form: {\"method\": \"ngram\", \"num_speculative_tokens\": K, "
                  "\"prompt_lookup_max\": N, \"prompt_lookup_min\": M} or {\"method\": "
                  "\"draft_model\", \"model\": DIR, \"num_speculative_tokens\": K}, and "
                  "\"rule\": "
                  "\"cost\" (default: propose only while it lowers the time per token at the "
                  "batch's measured step cost) or \"always\"");
}

// The engine's Speculation from the flags, checked; an error names the flag and the value.
// slots: the sequences the engine runs at once (a draft model's cache slots).
inline serve::Speculation parse_speculative(const SpeculativeFlags& f, int slots) {
  serve::Speculation s;
  std::string draft;  // a draft model's folder
  if (!f.spec.empty() && !f.config.empty())
    fail("--speculative and --speculative-config both given; use one");
  if (!f.config.empty()) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(f.config);
    } catch (const nlohmann::json::exception& e) {
      fail("--speculative-config: not valid JSON: ", e.what());
    }
    if (!j.is_object()) fail("--speculative-config: expected a JSON object, got ", shown(f.config));
    for (const auto& [key, v] : j.items()) {
      if (key == "method") {
        if (!v.is_string() || (v != "ngram" && v != "[ngram]" && v != "draft_model"))
          fail("--speculative-config: method ", v.dump(),
               " is not offered (servekit speculates with \"ngram\" or \"draft_model\")");
        continue;
      }
      if (key == "model") {
        if (!v.is_string() || v.get<std::string>().empty())
          fail("--speculative-config: model must be a draft model's folder, got ", v.dump());
        draft = v.get<std::string>();
        continue;
      }
      if (key == "rule") {
        if (v == "cost")
          s.rule = serve::SpecRule::cost;
        else if (v == "always")
          s.rule = serve::SpecRule::always;
        else
          fail("--speculative-config: rule ", v.dump(), " is not one of \"cost\", \"always\"");
        continue;
      }
      int* field = key == "num_speculative_tokens" ? &s.k
                   : key == "prompt_lookup_max"    ? &s.ngram_max
                   : key == "prompt_lookup_min"    ? &s.ngram_min
                                                   : nullptr;
      if (!field)
        fail("--speculative-config: unknown field '", key,
             "' (known: method, model, num_speculative_tokens, prompt_lookup_max, "
             "prompt_lookup_min, rule)");
      if (!v.is_number_integer()) fail("--speculative-config: ", key, " must be a whole number");
      *field = v.get<int>();
    }
    if (!j.contains("num_speculative_tokens")) s.k = 4;
    if (j.value("method", "") == "draft_model" && draft.empty())
      fail("--speculative-config: method \"draft_model\" needs \"model\": the draft's folder");
  } else if (f.spec == "none" || f.spec == "off" || f.spec.empty()) {
    return s;
  } else if (f.spec == "ngram") {
    s.k = 4;
  } else if (f.spec.rfind("ngram:", 0) == 0) {
    const std::string rest = f.spec.substr(6);
    const auto comma = rest.find(',');
    if (comma == std::string::npos)
      fail("--speculative: ", shown(f.spec), " should be ngram:N,K (e.g. ngram:3,4)");
    s.ngram_max = parse_number<int>("--speculative N", rest.substr(0, comma));
    s.k = parse_number<int>("--speculative K", rest.substr(comma + 1));
  } else if (f.spec.rfind("draft:", 0) == 0) {
    draft = f.spec.substr(6);
    s.k = 4;
    // A last ":K" of digits is K; the rest is the folder.
    if (const auto colon = draft.rfind(':');
        colon != std::string::npos && colon + 1 < draft.size() &&
        draft.find_first_not_of("0123456789", colon + 1) == std::string::npos) {
      s.k = parse_number<int>("--speculative K", draft.substr(colon + 1));
      draft.resize(colon);
    }
    if (draft.empty())
      fail("--speculative: ", shown(f.spec), " should be draft:DIR or draft:DIR:K");
  } else {
    fail("--speculative: ", shown(f.spec), " is not one of none, ngram, ngram:N,K, draft:DIR[:K]");
  }
  try {
    s.validate();
  } catch (const Error& e) {
    fail(f.config.empty() ? "--speculative: " : "--speculative-config: ", e.what());
  }
  if (!s.on()) fail("--speculative: K must be >= 1 to speculate (none turns it off)");
  if (!draft.empty()) s.draft = load_draft(draft, slots);
  return s;
}

}  // namespace servekit::cli
