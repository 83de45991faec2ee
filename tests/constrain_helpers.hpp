// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the constrain tests share: GPT-2's tokenizer, whether a whole text fits a grammar, the
// error a schema compiles to, and texts drawn through budgeted masks.
#include <catch2/catch.hpp>

#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "servekit/constrain/token_mask.hpp"

namespace constrain_test {

inline const servekit::text::Gpt2Tokenizer& tok() {
  static auto t =
      servekit::text::Gpt2Tokenizer::from_dir(std::filesystem::path(SERVEKIT_DATA) / "gpt2");
  return t;
}

// Whether the whole text fits the grammar (and could end there).
inline bool fits(const servekit::constrain::Grammar& g, std::string_view text) {
  using namespace servekit::constrain;
  Matcher m(g);
  State s, n;
  m.start(s);
  for (char c : text) {
    m.feed(s, static_cast<uint8_t>(c), n);
    std::swap(s, n);
    if (s.dead()) return false;
  }
  return m.accepts(s);
}
inline bool fits(const nlohmann::json& schema, std::string_view text) {
  return fits(*servekit::constrain::compile_json_schema(schema), text);
}

// The compiler's message for a schema's text ("" if it compiles).
inline std::string error_of(const std::string& schema_text) {
  try {
    servekit::constrain::compile_json_schema(std::string_view(schema_text));
  } catch (const servekit::Error& e) {
    return e.what();
  }
  return "";
}

// Every token fed on its own from s: allowed if a thread survives it and the text can still be
// completed within budget - 1 more tokens. Returns the allowed count; max_fin: the largest
// min_finish() among them.
inline int brute_mask(const servekit::constrain::Matcher& m, const servekit::constrain::Vocab& v,
                      const servekit::constrain::State& s, int budget, std::vector<uint32_t>& words,
                      int& max_fin) {
  words.assign(v.words(), 0);
  max_fin = 0;
  int allowed = 0;
  const bool complete = m.complete(s);
  for (int32_t id = 0; id < v.V; id++) {
    bool ok;
    if (id == v.eos) {
      ok = complete || m.accepts(s);
    } else if (complete || tok().token_view(id).empty()) {
      ok = false;
    } else {
      servekit::constrain::State a, b;
      a.copy_from(s);
      for (char ch : tok().token_view(id)) {
        m.feed(a, static_cast<uint8_t>(ch), b);
        std::swap(a, b);
        if (a.dead()) break;
      }
      ok = !a.dead() && m.min_finish(a) <= budget - 1;
      if (ok) max_fin = std::max(max_fin, m.min_finish(a));
    }
    if (ok) words[id >> 5] |= 1u << (id & 31), allowed++;
  }
  return allowed;
}

// A token the mask allows, drawn uniformly (there must be one).
inline int32_t pick(const std::vector<uint32_t>& words, int V, std::mt19937& rng) {
  std::vector<int32_t> ok;
  for (int32_t id = 0; id < V; id++)
    if (words[id >> 5] >> (id & 31) & 1) ok.push_back(id);
  REQUIRE(!ok.empty());
  return ok[rng() % ok.size()];
}

// A text drawn through c's masks with `budget` tokens, each the mask of the tokens left; stops
// at the end-of-text token or when the text is complete.
inline std::string budget_walk(servekit::constrain::Constraint& c, int budget, std::mt19937& rng) {
  std::string text;
  for (int used = 0; used < budget && !c.complete(); used++) {
    const int32_t id = pick(c.mask(budget - used), c.vocab().V, rng);
    if (id == c.vocab().eos) break;
    c.advance(id, tok().token_view(id));
    text += tok().token_view(id);
  }
  return text;
}

}  // namespace constrain_test
