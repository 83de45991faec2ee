// SPDX-License-Identifier: Apache-2.0
// Any bytes as a JSON schema (or, if they are not one, a regex, a choice or a GBNF grammar), then
// (after the first NUL byte) as a text fed to its matcher,
// with the tiny fixture vocabulary (512 tokens, every byte one of them): compiling is a
// servekit::Error or a grammar; and where the text starts and where it stops (its last live
// state), unless complete, the
// mask allows some token, and a budget of exactly min_finish() + 1 tokens still allows one
// (min_finish() never promises an ending that does not exist); the tokens the grammar forces at
// the start (jump-forward) are each allowed by the mask in turn.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "servekit/constrain/forced_tokens.hpp"
#include "servekit/constrain/token_mask.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  namespace c = servekit::constrain;
  static const auto tok = servekit::text::Gpt2Tokenizer::from_dir(SERVEKIT_FIXTURES "/tiny-vocab");
  static const auto vocab = c::Vocab::of(tok, tok.vocab_size(), tok.eos_id());
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const auto cut = all.find('\0');
  const std::string_view schema = all.substr(0, cut);
  const std::string_view text = cut == std::string_view::npos ? "" : all.substr(cut + 1, 64);
  // Bytes that are not a schema are tried as a regex constraint (a whole text it matches), or,
  // after a first byte 0x01, as a choice among the lines that follow, or after 0x02 as a GBNF
  // grammar: the same matcher and masks.
  std::shared_ptr<const c::Grammar> g;
  try {
    g = c::compile_json_schema(schema);
  } catch (const servekit::Error&) {
    try {
      if (!schema.empty() && schema[0] == '\x01') {
        std::vector<std::string> choices;
        std::size_t at = 1;
        while (at <= schema.size() && choices.size() < 8) {
          const auto nl = std::min(schema.find('\n', at), schema.size());
          choices.emplace_back(schema.substr(at, nl - at));
          at = nl + 1;
        }
        g = c::compile_choice(choices);
      } else if (!schema.empty() && schema[0] == '\x02') {
        g = c::compile_gbnf(schema.substr(1));
      } else {
        g = c::compile_regex(std::string(schema));
      }
    } catch (const servekit::Error&) {
      return 0;
    }
  }
  c::Matcher m(*g);
  c::MaskMaker maker(*g, *vocab);
  c::State s, n;
  m.start(s);
  auto check = [&] {
    if (m.complete(s)) return;
    const int fin = m.min_finish(s);
    if (fin >= c::kInf) std::abort();  // alive, yet no ending
    if (maker.make(s, c::kInf).allowed == 0) std::abort();
    if (maker.make(s, fin + 1).allowed == 0) std::abort();
  };
  check();
  {
    c::Constraint con(g, vocab);
    std::vector<int32_t> run;
    c::forced_tokens(con, tok, run);
    for (std::size_t i = 0; i < run.size() && i < 4; i++) {
      con.mask(c::kInf);
      if (!con.allowed(run[i])) std::abort();
      con.advance(run[i], tok.token_view(run[i]));
    }
  }
  // Masks cost ~a millisecond each under the sanitizers: check where the text stops (or the
  // last state it kept alive).
  for (char ch : text) {
    m.feed(s, static_cast<uint8_t>(ch), n);
    if (n.dead()) break;
    std::swap(s, n);
  }
  check();
  return 0;
}
