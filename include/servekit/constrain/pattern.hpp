// SPDX-License-Identifier: Apache-2.0
#pragma once
// A JSON schema's string pattern (or a format's) as the matcher runs it: a regular expression
// compiled to its Glushkov automaton, stepped as a set of positions (constrain/grammar.hpp
// compiles the schema, constrain/matcher.hpp walks it, constrain/pattern_dfa.hpp numbers its
// sets for the masks).
//
// A position is one occurrence of a character class in the expression, after counted
// repetitions are written out; a state is the set of positions that may have matched the last
// character (bit 0: none yet), so it fits the 64 bits of a matcher frame: at most 63
// positions. In a JSON string, characters are printable ASCII other than '"' and '\', so that a
// matching string is written without escapes; a pattern over a whole text (a regex
// constraint, constrain/text_grammar.hpp) also has '"', '\', tab, newline and return.
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "servekit/constrain/pattern_parser.hpp"
#include "servekit/core/error.hpp"

namespace servekit::constrain {

inline constexpr int kInf = std::numeric_limits<int>::max() / 4;

struct Pattern {
  int n = 0;                            // positions 1..n
  std::array<uint64_t, 128> by_char{};  // positions whose class holds character c
  std::vector<uint64_t> follow;         // (n + 1) positions that may come after p; [0]: first
  uint64_t last = 0;                    // positions a match may end on (bit 0: the empty one)
  std::vector<int> dist;                // (n + 1) fewest characters from p to a match

  uint64_t start() const { return 1; }
  // The fewest characters of a match that is not empty.
  int shortest_nonempty() const {
    int best = kInf;
    for (uint64_t r = follow[0]; r != 0; r &= r - 1)
      best = std::min(best, dist[std::countr_zero(r)] + 1);
    return best;
  }
  uint64_t step(uint64_t s, uint8_t c) const {
    if (c >= 128) return 0;
    uint64_t t = 0;
    for (uint64_t r = s; r != 0; r &= r - 1) t |= follow[std::countr_zero(r)];
    return t & by_char[c];
  }
  bool accepts(uint64_t s) const { return (s & last) != 0; }
  int chars_needed(uint64_t s) const {
    int best = kInf;
    for (uint64_t r = s; r != 0; r &= r - 1) best = std::min(best, dist[std::countr_zero(r)]);
    return best;
  }
};

namespace pattern_detail {

// Positions the node expands to (saturating: checked before anything is written out).
inline long positions(const Node& n) {
  constexpr long kCap = 1L << 20;
  switch (n.kind) {
    case Node::Chars:
      return 1;
    case Node::Cat:
    case Node::Alt: {
      long s = 0;
      for (const auto& k : n.kids) s = std::min(kCap, s + positions(*k));
      return s;
    }
    case Node::Repeat: {
      const long copies = n.hi < 0 ? std::max(n.lo, 1) : n.hi;
      return std::min<long>(kCap, positions(*n.kids[0]) * std::min<long>(copies, kCap));
    }
  }
  return 0;
}

// Glushkov's construction: first, last and nullable of a node, follow sets filled in.
struct Part {
  uint64_t first = 0, last = 0;
  bool nullable = true;
};

class Builder {
 public:
  explicit Builder(Pattern& p) : p_(p) {}

  Part build(const Node& n) {
    switch (n.kind) {
      case Node::Chars: {
        const int pos = ++p_.n;
        p_.follow.push_back(0);
        for (int c = 0; c < 128; c++)
          if (n.set[c >> 6] >> (c & 63) & 1) p_.by_char[c] |= uint64_t(1) << pos;
        return {uint64_t(1) << pos, uint64_t(1) << pos, false};
      }
      case Node::Cat: {
        Part r;
        for (const auto& k : n.kids) r = cat(r, build(*k));
        return r;
      }
      case Node::Alt: {
        Part r{0, 0, false};
        for (const auto& k : n.kids) {
          const Part q = build(*k);
          r.first |= q.first, r.last |= q.last, r.nullable |= q.nullable;
        }
        return r;
      }
      case Node::Repeat: {
        Part r;
        const Node& x = *n.kids[0];
        for (int i = 0; i < n.lo - (n.hi < 0 && n.lo > 0 ? 1 : 0); i++) r = cat(r, build(x));
        if (n.hi < 0) {  // one more copy that loops; optional when lo is 0
          Part q = build(x);
          link(q.last, q.first);
          if (n.lo == 0) q.nullable = true;
          r = cat(r, q);
        } else {
          for (int i = n.lo; i < n.hi; i++) {
            Part q = build(x);
            q.nullable = true;
            r = cat(r, q);
          }
        }
        return r;
      }
    }
    return {};
  }

  Part cat(const Part& a, const Part& b) {
    link(a.last, b.first);
    return {a.first | (a.nullable ? b.first : 0), b.last | (b.nullable ? a.last : 0),
            a.nullable && b.nullable};
  }

 private:
  void link(uint64_t from, uint64_t to) {
    for (uint64_t r = from; r != 0; r &= r - 1) p_.follow[std::countr_zero(r)] |= to;
  }
  Pattern& p_;
};

}  // namespace pattern_detail

// In a JSON string a pattern matches anywhere unless anchored, as JSON schema's does: an
// unanchored end allows any characters there. Over a whole text it matches all of it, as
// vLLM's guided_regex does. at: where the schema has it (errors name it).
inline Pattern compile_pattern(const std::string& re, const std::string& at,
                               Alphabet alphabet = Alphabet::JsonString) {
  using namespace pattern_detail;
  Parser parser(re,
                alphabet == Alphabet::Text
                    ? std::string("regex")
                    : "json schema: at " + (at.empty() ? std::string("/") : at) + ": pattern",
                alphabet);
  bool head = false, tail = false;
  auto body = parser.parse_all(head, tail);
  if (alphabet == Alphabet::Text) head = tail = true;
  auto n = std::make_unique<Node>();
  n->kind = Node::Cat;
  auto any_star = [&] {
    auto r = std::make_unique<Node>();
    r->kind = Node::Repeat, r->lo = 0, r->hi = -1;
    r->kids.push_back(parser.chars(parser.any()));
    return r;
  };
  if (!head) n->kids.push_back(any_star());
  n->kids.push_back(std::move(body));
  if (!tail) n->kids.push_back(any_star());
  // Checked before expanding: a count such as {77777741} would otherwise take gigabytes.
  if (positions(*n) > 63) parser.err("it expands to more than 63 positions");
  Pattern p;
  p.follow.push_back(0);  // position 0: before any character
  Builder b(p);
  const Part whole = b.build(*n);
  p.follow[0] = whole.first;
  p.last = whole.last | (whole.nullable ? 1 : 0);
  // Fewest characters to a match, from each position: relaxed until nothing changes.
  p.dist.assign(p.n + 1, kInf);
  for (int q = 0; q <= p.n; q++)
    if (p.last >> q & 1) p.dist[q] = 0;
  for (bool changed = true; changed;) {
    changed = false;
    for (int q = 0; q <= p.n; q++)
      for (uint64_t r = p.follow[q]; r != 0; r &= r - 1) {
        const int d = p.dist[std::countr_zero(r)];
        if (d < kInf && d + 1 < p.dist[q]) p.dist[q] = d + 1, changed = true;
      }
  }
  if (p.dist[0] >= kInf) parser.err("it matches no string");
  return p;
}

}  // namespace servekit::constrain
