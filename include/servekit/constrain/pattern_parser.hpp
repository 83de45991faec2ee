// SPDX-License-Identifier: Apache-2.0
#pragma once
// A regular expression's syntax tree and the parser that makes it (constrain/pattern.hpp turns
// the tree into the automaton the matcher steps). The supported syntax is what JSON schema
// patterns and guided-decoding regexes use: literal characters, '.', classes, shorthands,
// groups, alternation and quantifiers; anchors at the ends only. Every refusal names what is
// refused and lists what is supported.
#include <array>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/core/json_brief.hpp"

namespace servekit::constrain {

// Where a pattern's characters are written: inside a JSON string, or as a text of its own.
enum class Alphabet { JsonString, Text };

namespace pattern_detail {

using Set = std::array<uint64_t, 2>;  // ASCII characters

struct Node {
  enum Kind { Chars, Cat, Alt, Repeat } kind = Chars;
  Set set{};
  std::vector<std::unique_ptr<Node>> kids;
  int lo = 1, hi = 1;  // Repeat: hi -1 unbounded
};

// Recursive descent over the expression: alternation of concatenations of quantified atoms.
class Parser {
 public:
  // context: how errors start ("json schema: at /a: pattern").
  Parser(const std::string& re, std::string context, Alphabet alphabet)
      : re_(re), context_(std::move(context)), text_(alphabet == Alphabet::Text) {
    range(any_, 0x20, 0x7e);
    if (text_) add_char(any_, '\t');
    all_ = any_;
    if (text_) add_char(all_, '\n'), add_char(all_, '\r');
  }

  std::unique_ptr<Node> parse_all(bool& head, bool& tail) {
    head = i_ < re_.size() && re_[i_] == '^';
    if (head) i_++;
    auto n = alt();
    tail = false;
    if (i_ < re_.size() && re_[i_] == '$' && i_ + 1 == re_.size()) tail = true, i_++;
    if (i_ < re_.size()) {
      if (re_[i_] == ')') err("an unmatched ')'");
      err("'$' before the end");
    }
    return n;
  }

  std::unique_ptr<Node> chars(const Set& s) {
    auto n = std::make_unique<Node>();
    n->set = s;
    return n;
  }
  const Set& any() const { return any_; }

  [[noreturn]] void err(const std::string& what) const {
    fail(context_, " ", string_brief(re_), ": ", what,
         " (supported: ^ and $ at the ends, literal characters, ., [classes], \\d \\w \\s and "
         "their negations, (groups), (?:groups), |, and ? * + {n} {n,} {n,m} after each)");
  }

 private:
  bool at_end_of_alt() const {
    return i_ >= re_.size() || re_[i_] == '|' || re_[i_] == ')' ||
           (re_[i_] == '$' && i_ + 1 == re_.size());
  }

  std::unique_ptr<Node> alt() {
    auto n = std::make_unique<Node>();
    n->kind = Node::Alt;
    n->kids.push_back(cat());
    while (i_ < re_.size() && re_[i_] == '|') {
      i_++;
      n->kids.push_back(cat());
    }
    if (n->kids.size() == 1) return std::move(n->kids[0]);
    return n;
  }

  std::unique_ptr<Node> cat() {
    auto n = std::make_unique<Node>();
    n->kind = Node::Cat;
    while (!at_end_of_alt()) n->kids.push_back(quantified());
    return n;
  }

  std::unique_ptr<Node> quantified() {
    auto a = atom();
    if (i_ >= re_.size()) return a;
    int lo = 1, hi = 1;
    const char q = re_[i_];
    if (q == '?')
      lo = 0, hi = 1, i_++;
    else if (q == '*')
      lo = 0, hi = -1, i_++;
    else if (q == '+')
      lo = 1, hi = -1, i_++;
    else if (q == '{')
      braces(lo, hi);
    else
      return a;
    if (i_ < re_.size() && re_[i_] == '?') i_++;  // lazy: the same strings match
    if (i_ < re_.size() && (re_[i_] == '*' || re_[i_] == '+' || re_[i_] == '?' || re_[i_] == '{'))
      err("a quantifier after a quantifier");
    auto r = std::make_unique<Node>();
    r->kind = Node::Repeat, r->lo = lo, r->hi = hi;
    r->kids.push_back(std::move(a));
    return r;
  }

  void braces(int& lo, int& hi) {
    const auto close = re_.find('}', i_);
    if (close == std::string::npos) err("an unterminated {");
    const std::string body = re_.substr(i_ + 1, close - i_ - 1);
    const auto comma = body.find(',');
    try {
      std::size_t used = 0;
      const std::string a = body.substr(0, comma);
      lo = std::stoi(a, &used);
      if (used != a.size()) throw std::invalid_argument(a);
      if (comma == std::string::npos) {
        hi = lo;
      } else if (comma + 1 == body.size()) {
        hi = -1;
      } else {
        const std::string b = body.substr(comma + 1);
        hi = std::stoi(b, &used);
        if (used != b.size()) throw std::invalid_argument(b);
      }
    } catch (const std::exception&) {
      err("a malformed {n,m}");
    }
    if (lo < 0 || (hi >= 0 && hi < lo)) err("a malformed {n,m}");
    i_ = close + 1;
  }

  std::unique_ptr<Node> atom() {
    const char c = re_[i_];
    if (c == '(') {
      i_++;
      if (i_ < re_.size() && re_[i_] == '?') {
        if (i_ + 1 < re_.size() && re_[i_ + 1] == ':')
          i_ += 2;
        else
          err("lookaround and named groups are not supported");
      }
      auto n = alt();
      if (i_ >= re_.size() || re_[i_] != ')') err("an unterminated group");
      i_++;
      return n;
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') err("a quantifier with nothing before it");
    if (c == '^' || c == '$') err("'^' or '$' inside the pattern (only at its ends)");
    Set s{};
    if (c == '.') {
      s = any_, i_++;
    } else if (c == '\\') {
      if (i_ + 1 >= re_.size()) err("it ends with a lone backslash");
      escape(re_[i_ + 1], s);
      i_ += 2;
    } else if (c == '[') {
      s = klass();
    } else {
      add_char(s, static_cast<unsigned char>(c));
      i_++;
    }
    if (s[0] == 0 && s[1] == 0)
      err(text_ ? "an atom matches no printable ASCII character, tab or newline"
                : "an atom matches no printable ASCII character other than '\"' and '\\'");
    return chars(s);
  }

  void escape(char e, Set& s) const {
    if (shorthand(e, s)) return;
    if (e == 'b' || e == 'B') err("word boundaries are not supported");
    if (e >= '1' && e <= '9') err("backreferences are not supported");
    if (text_ && (e == 'n' || e == 't' || e == 'r')) {
      add_char(s, e == 'n' ? '\n' : e == 't' ? '\t' : '\r');
      return;
    }
    if (e == 'n' || e == 't' || e == 'r' || e == 'f' || e == 'v' || e == '0')
      err("a control character cannot be written unescaped in a JSON string");
    if (e == 'u' || e == 'x' || e == 'p' || e == 'P' || e == 'c' || e == 'k')
      err(std::string("\\") + e + " escapes are not supported");
    add_char(s, static_cast<unsigned char>(e));
  }

  Set klass() {
    std::size_t j = i_ + 1;
    const bool neg = j < re_.size() && re_[j] == '^';
    if (neg) j++;
    Set s{};
    bool first = true;
    while (j < re_.size() && (re_[j] != ']' || first)) {
      first = false;
      int lo = static_cast<unsigned char>(re_[j]);
      if (re_[j] == '\\') {
        if (j + 1 >= re_.size()) err("an unterminated class");
        if (shorthand(re_[j + 1], s)) {
          j += 2;
          continue;
        }
        lo = static_cast<unsigned char>(re_[j + 1]);
        j++;
      }
      j++;
      if (j + 1 < re_.size() && re_[j] == '-' && re_[j + 1] != ']') {
        int hi = static_cast<unsigned char>(re_[j + 1]);
        if (re_[j + 1] == '\\' && j + 2 < re_.size())
          hi = static_cast<unsigned char>(re_[j + 2]), j++;
        if (hi < lo) err("a class range runs backwards");
        range(s, lo, hi);
        j += 2;
      } else {
        add_char(s, lo);
      }
    }
    if (j >= re_.size()) err("an unterminated class");
    i_ = j + 1;
    return neg ? Set{all_[0] & ~s[0], all_[1] & ~s[1]} : s;
  }

  void add_char(Set& s, int c) const {
    const bool ok = text_ ? (c >= 0x20 && c < 0x7f) || c == '\t' || c == '\n' || c == '\r'
                          : c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
    if (ok) s[c >> 6] |= uint64_t(1) << (c & 63);
  }
  void range(Set& s, int a, int b) const {
    for (int c = a; c <= b; c++) add_char(s, c);
  }
  bool shorthand(char e, Set& s) const {
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
        add_char(t, ' '), add_char(t, '\t'), add_char(t, '\n'), add_char(t, '\r');
        break;
      default:
        return false;
    }
    if (e >= 'A' && e <= 'Z') t = {all_[0] & ~t[0], all_[1] & ~t[1]};
    s[0] |= t[0], s[1] |= t[1];
    return true;
  }

  const std::string& re_;
  std::string context_;
  bool text_;
  std::size_t i_ = 0;
  Set any_{};  // what '.' matches
  Set all_{};  // what a negated class is taken from
};

}  // namespace pattern_detail

}  // namespace servekit::constrain
