// SPDX-License-Identifier: Apache-2.0
#pragma once
// Grammars of texts that are not JSON: a regular expression the whole text must match (vLLM's
// guided_regex, a "regex" response format or grammar in TGI and LoRAX) and a choice among
// fixed texts (vLLM's guided_choice). The matcher, the masks and the budget treat them as any
// grammar: a regex is a Text node under the root (its pattern over ASCII with tab and
// newlines, constrain/pattern.hpp), a choice is a literal with the choices as its texts.
#include <memory>
#include <string>
#include <vector>

#include "servekit/constrain/grammar_graph.hpp"
#include "servekit/constrain/min_length.hpp"
#include "servekit/constrain/pattern.hpp"
#include "servekit/core/error.hpp"
#include "servekit/core/json_brief.hpp"

namespace servekit::constrain {

namespace detail {

inline std::shared_ptr<Grammar> text_grammar(std::string source, Node value,
                                             std::vector<Pattern> patterns = {}) {
  auto g = std::make_shared<Grammar>();
  g->source = std::move(source);
  g->patterns = std::move(patterns);
  Node root;
  root.kind = Kind::Root;
  root.items = 1;
  g->nodes = {root, std::move(value)};
  min_lengths(*g);
  return g;
}

}  // namespace detail

// A text the whole of which matches re (ASCII: printable characters, tab, newlines).
inline std::shared_ptr<const Grammar> compile_regex(const std::string& re) {
  Pattern p = compile_pattern(re, "", Alphabet::Text);
  if (p.shortest_nonempty() >= kInf)
    fail("regex ", string_brief(re), ": it matches only the empty text, which cannot be generated");
  Node text;
  text.kind = Kind::Text;
  text.pattern = 0;
  std::vector<Pattern> ps;
  ps.push_back(std::move(p));
  return detail::text_grammar("regex " + string_brief(re), std::move(text), std::move(ps));
}

// A text that is exactly one of the choices.
inline std::shared_ptr<const Grammar> compile_choice(const std::vector<std::string>& choices) {
  if (choices.empty()) fail("choice: the list of choices is empty");
  std::string source = "choice [";
  for (std::size_t i = 0; i < choices.size(); i++) {
    if (choices[i].empty()) fail("choice: choice ", i, " is empty, which cannot be generated");
    source += (i ? ", " : "") + string_brief(choices[i]);
  }
  Node lit;
  lit.kind = Kind::Literal;
  lit.texts = choices;
  return detail::text_grammar(source + "]", std::move(lit));
}

}  // namespace servekit::constrain
