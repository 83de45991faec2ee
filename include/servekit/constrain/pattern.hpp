// SPDX-License-Identifier: Apache-2.0
#pragma once
// A JSON schema's string pattern as the matcher runs it: a sequence of character classes, each
// once, optional or repeated, stepped as a set of positions (constrain/grammar.hpp compiles
// the schema, constrain/matcher.hpp walks it).
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/core/json_brief.hpp"

namespace servekit::constrain {

inline constexpr int kInf = std::numeric_limits<int>::max() / 4;

// A string pattern: a sequence of character classes, each once, optional, or repeated; no
// groups or alternation. Its characters are printable ASCII other than '"' and '\', so that a
// matching string is written without escapes. States are sets of positions (bit i: the next
// atom to match is i; bit n: matched), at most 63 atoms after {m,n} is expanded.
struct Pattern {
  struct Atom {
    std::array<uint64_t, 2> set{};  // ASCII characters it matches
    bool optional = false, loop = false;
  };
  std::vector<Atom> atoms;
  std::vector<int> need;  // (n + 1) mandatory atoms from position i to the end

  int n() const { return static_cast<int>(atoms.size()); }
  uint64_t closure(uint64_t s) const {
    for (int i = 0; i < n(); i++)
      if ((s >> i & 1) && atoms[i].optional) s |= uint64_t(1) << (i + 1);
    return s;
  }
  uint64_t start() const { return closure(1); }
  uint64_t step(uint64_t s, uint8_t c) const {
    if (c >= 128) return 0;
    uint64_t t = 0;
    for (int i = 0; i < n(); i++)
      if ((s >> i & 1) && (atoms[i].set[c >> 6] >> (c & 63) & 1)) {
        t |= uint64_t(1) << (i + 1);
        if (atoms[i].loop) t |= uint64_t(1) << i;
      }
    return closure(t);
  }
  bool accepts(uint64_t s) const { return s >> n() & 1; }
  int chars_needed(uint64_t s) const {
    int best = kInf;
    for (int i = 0; i <= n(); i++)
      if (s >> i & 1) best = std::min(best, need[i]);
    return best;
  }
};

// ^? atom quantifier? ... $?; an unanchored end allows any characters there, as JSON
// schema's pattern matches anywhere in the string.
inline Pattern compile_pattern(const std::string& re, const std::string& at) {
  using Set = std::array<uint64_t, 2>;
  auto add_char = [](Set& s, int c) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') s[c >> 6] |= uint64_t(1) << (c & 63);
  };
  auto range = [&](Set& s, int a, int b) {
    for (int c = a; c <= b; c++) add_char(s, c);
  };
  Set any{};
  range(any, 0x20, 0x7e);
  auto shorthand = [&](char e, Set& s) {
    Set t{};
    switch (e) {
      case 'd':
      case 'D':
        range(t, '0', '9');
        break;
      case 'w':
      case 'W':
        range(t, '0', '9'), range(t, 'a', 'z'), range(t, 'A', 'Z'), add_char(t, '_');
        break;
      case 's':
      case 'S':
        add_char(t, ' ');
        break;
      default:
        return false;
    }
    if (e >= 'A' && e <= 'Z') t = {any[0] & ~t[0], any[1] & ~t[1]};
    s[0] |= t[0], s[1] |= t[1];
    return true;
  };
  auto err = [&](const std::string& what) {
    fail("json schema: at ", at.empty() ? std::string("/") : at, ": pattern ", string_brief(re),
         ": ", what,
         " (supported: ^, $, literal characters, ., [classes], \\d \\w \\s, and ? * + {n} {n,} "
         "{n,m} after each)");
  };
  Pattern p;
  std::size_t i = 0;
  const bool head = !re.empty() && re[0] == '^';
  if (head) i = 1;
  bool tail = false;
  std::vector<Pattern::Atom> atoms;
  if (!head) atoms.push_back({any, true, true});
  while (i < re.size()) {
    const char c = re[i];
    if (c == '$' && i + 1 == re.size()) {
      tail = true;
      i++;
      break;
    }
    Pattern::Atom a;
    if (c == '(' || c == ')' || c == '|') err("groups and alternation are not supported");
    if (c == '*' || c == '+' || c == '?' || c == '{') err("a quantifier with nothing before it");
    if (c == '.') {
      a.set = any, i++;
    } else if (c == '\\') {
      if (i + 1 >= re.size()) err("it ends with a lone backslash");
      const char e = re[i + 1];
      if (!shorthand(e, a.set)) add_char(a.set, e);
      i += 2;
    } else if (c == '[') {
      std::size_t j = i + 1;
      const bool neg = j < re.size() && re[j] == '^';
      if (neg) j++;
      Set s{};
      bool first = true;
      while (j < re.size() && (re[j] != ']' || first)) {
        first = false;
        int lo = static_cast<unsigned char>(re[j]);
        if (re[j] == '\\') {
          if (j + 1 >= re.size()) err("an unterminated class");
          if (shorthand(re[j + 1], s)) {
            j += 2;
            continue;
          }
          lo = static_cast<unsigned char>(re[j + 1]);
          j++;
        }
        j++;
        if (j + 1 < re.size() && re[j] == '-' && re[j + 1] != ']') {
          int hi = static_cast<unsigned char>(re[j + 1]);
          if (re[j + 1] == '\\' && j + 2 < re.size())
            hi = static_cast<unsigned char>(re[j + 2]), j++;
          if (hi < lo) err("a class range runs backwards");
          range(s, lo, hi);
          j += 2;
        } else {
          add_char(s, lo);
        }
      }
      if (j >= re.size()) err("an unterminated class");
      a.set = neg ? Set{any[0] & ~s[0], any[1] & ~s[1]} : s;
      i = j + 1;
    } else {
      add_char(a.set, static_cast<unsigned char>(c));
      i++;
    }
    if (a.set[0] == 0 && a.set[1] == 0)
      err("an atom matches no printable ASCII character other than '\"' and '\\'");
    int lo = 1, hi = 1;  // hi = -1: unbounded
    if (i < re.size()) {
      const char q = re[i];
      if (q == '?')
        lo = 0, hi = 1, i++;
      else if (q == '*')
        lo = 0, hi = -1, i++;
      else if (q == '+')
        lo = 1, hi = -1, i++;
      else if (q == '{') {
        const auto close = re.find('}', i);
        if (close == std::string::npos) err("an unterminated {");
        const std::string body = re.substr(i + 1, close - i - 1);
        const auto comma = body.find(',');
        try {
          lo = std::stoi(body.substr(0, comma));
          hi = comma == std::string::npos ? lo
               : comma + 1 == body.size() ? -1
                                          : std::stoi(body.substr(comma + 1));
        } catch (const std::exception&) {
          err("a malformed {n,m}");
        }
        if (lo < 0 || (hi >= 0 && hi < lo)) err("a malformed {n,m}");
        i = close + 1;
      }
    }
    // Checked before expanding: a count such as {77777741} would otherwise take gigabytes.
    if (atoms.size() + (hi < 0 ? static_cast<std::size_t>(lo) + 1 : static_cast<std::size_t>(hi)) >
        63)
      err("it expands to more than 63 positions");
    for (int k = 0; k < lo; k++) atoms.push_back({a.set, false, false});
    if (hi < 0)
      atoms.push_back({a.set, true, true});
    else
      for (int k = lo; k < hi; k++) atoms.push_back({a.set, true, false});
    if (atoms.size() > 63) err("it expands to more than 63 positions");
  }
  if (i < re.size()) err("'$' before the end");
  if (!tail) atoms.push_back({any, true, true});
  if (atoms.size() > 63) err("it expands to more than 63 positions");
  p.atoms = std::move(atoms);
  p.need.assign(p.n() + 1, 0);
  for (int k = p.n() - 1; k >= 0; k--) p.need[k] = p.need[k + 1] + (p.atoms[k].optional ? 0 : 1);
  return p;
}

}  // namespace servekit::constrain
