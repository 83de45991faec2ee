// SPDX-License-Identifier: Apache-2.0
// servekit's half of the grammar engines side by side (bench/grammar/peers.py runs the others
// on the same documents): for each JSON schema and a document valid under it, given as GPT-2
// token ids, the time to compile the schema and, walking the document's tokens from a fresh
// grammar (cold: every state seen for the first time), the time of each token's mask.
//
//   input  (--docs, JSONL):  {"name": "...", "schema": {...}, "tokens": [ids]}
//   output (--out, CSV):     name,index,kind,us,ok    kind: compile | mask; ok: the document's
//                            token was in the mask (compile: the schema was accepted)
// A schema servekit refuses gets one compile line with ok = 0 and its error on stderr.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common.hpp"
#include "servekit/constrain/token_mask.hpp"
#include "servekit/core/error.hpp"
#include "servekit/text/tokenizer.hpp"
#include "servekit/text/vocab_dir.hpp"

namespace sk = servekit;
namespace constrain = servekit::constrain;
using json = nlohmann::json;

namespace {

double us_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

constexpr int kBudget = 1 << 20;  // no length limit: the peers have none

struct Doc {
  std::string name, schema;
  std::vector<int32_t> tokens;
};

// The median of `reps` compiles (a fresh grammar each), as the peers' are timed.
double compile_us(const std::string& schema, int reps) {
  std::vector<double> t;
  for (int r = 0; r < reps; r++) {
    const auto t0 = std::chrono::steady_clock::now();
    auto g = constrain::compile_json_schema(std::string_view(schema));
    t.push_back(us_since(t0));
  }
  return servekit::bench::percentile(t, 50);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"servekit's JSON-schema masks along given documents (bench/grammar/peers.py)"};
  std::string docs_path, out_path, vocab = sk::text::default_vocab_dir().string();
  int reps = 5;
  app.add_option("--docs", docs_path, "JSONL: name, schema, tokens")->required();
  app.add_option("--out", out_path, "CSV of times")->required();
  app.add_option("--vocab", vocab, "GPT-2 vocabulary folder");
  app.add_option("--compile-reps", reps, "compiles per schema (median)")->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);
  try {
    const auto tok = sk::text::Gpt2Tokenizer::from_dir(vocab);
    const int V = tok.vocab_size();
    // Once per vocabulary, before any schema (as the peers' tokenizer tables): the tokens in
    // byte order and what each does inside a JSON string.
    const auto v0 = std::chrono::steady_clock::now();
    const auto vocab_set = constrain::Vocab::of(tok, V, tok.eos_id());
    const double vocab_ms = us_since(v0) / 1000;
    std::vector<Doc> docs;
    {
      std::ifstream in(docs_path);
      if (!in) sk::fail("bench_grammar_masks: cannot read ", docs_path);
      int line_no = 0;
      for (std::string line; std::getline(in, line);) {
        line_no++;
        if (line.empty()) continue;
        const json j = json::parse(line);
        if (!j.contains("name") || !j.contains("schema") || !j.contains("tokens"))
          sk::fail("bench_grammar_masks: ", docs_path, " line ", line_no,
                   ": needs name, schema and tokens");
        docs.push_back({j["name"].get<std::string>(), j["schema"].dump(),
                        j["tokens"].get<std::vector<int32_t>>()});
      }
    }
    std::ofstream out(out_path);
    out << "name,index,kind,us,ok\n";
    int refused = 0, rejected = 0;
    for (std::size_t d = 0; d < docs.size(); d++) {
      const Doc& doc = docs[d];
      std::fprintf(stderr, "\r  %zu/%zu %-30s", d + 1, docs.size(), doc.name.c_str());
      double c_us = 0;
      try {
        c_us = compile_us(doc.schema, reps);
      } catch (const sk::Error& e) {
        std::fprintf(stderr, "\n  %s: refused: %s\n", doc.name.c_str(), e.what());
        out << doc.name << ",0,compile,0,0\n";
        refused++;
        continue;
      }
      out << doc.name << ",0,compile," << c_us << ",1\n";
      // A fresh grammar, so that every state's mask is computed, not found in its cache.
      constrain::Constraint c(constrain::compile_json_schema(std::string_view(doc.schema)),
                              vocab_set);
      for (std::size_t i = 0; i <= doc.tokens.size(); i++) {
        const int32_t id = i < doc.tokens.size() ? doc.tokens[i] : tok.eos_id();
        const auto t0 = std::chrono::steady_clock::now();
        c.mask(kBudget);
        const double us = us_since(t0);
        const bool ok = c.allowed(id) || (id == tok.eos_id() && c.accepts());
        out << doc.name << "," << i << ",mask," << us << "," << ok << "\n";
        if (!ok) {
          std::fprintf(stderr, "\n  %s: token %zu (%d) not in the mask\n", doc.name.c_str(), i, id);
          rejected++;
          break;
        }
        if (id != tok.eos_id()) c.advance(id, tok.token_view(id));
      }
    }
    std::fprintf(stderr, "\r%60s\r", "");
    std::printf(
        "bench_grammar_masks: %zu documents, %d schemas refused, %d documents cut short; the "
        "vocabulary's tables (once) %.1f ms\n",
        docs.size(), refused, rejected, vocab_ms);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_grammar_masks: error: %s\n", e.what());
    return 1;
  }
}
