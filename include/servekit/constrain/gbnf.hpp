// SPDX-License-Identifier: Apache-2.0
#pragma once
// Context-free grammars in GBNF, llama.cpp's notation (also what vLLM's guided_grammar and
// llama-server's "grammar" take), compiled to the graph the matcher walks:
//
//   root   ::= "(" ws expr ws ")" | expr        # a rule per line; the text starts at root
//   expr   ::= term ([-+] term)*                # "literal", [class], [^negated], ., name,
//   term   ::= [0-9]+ | "x"                     # ( group ), postfix * + ? {m} {m,} {m,n}
//   ws     ::= [ \t\n]*
//
// A rule is an AnyOf of its alternatives, an alternative a Seq of its elements, a repetition a
// Repeat, a character class a Chars node (a set of bytes) or, where it takes non-ASCII
// characters, an AnyOf of that and their UTF-8 texts; a rule name is the rule's node, so rules
// may refer to each other in any order and recursively, as long as no rule can reach itself
// before a byte is written (left recursion, refused: write it as a repetition). Characters are
// UTF-8 (classes and `.` take characters, not bytes: well-formed UTF-8 texts, surrogates left
// out). Limits: a text nests at most kMaxDepth - 1 rules and
// repetitions deep (constrain/match_state.hpp), past which deeper ones are not started.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "servekit/constrain/grammar_graph.hpp"
#include "servekit/constrain/min_length.hpp"
#include "servekit/core/error.hpp"
#include "servekit/core/json_brief.hpp"

namespace servekit::constrain {

namespace gbnf {

class Parser {
 public:
  explicit Parser(std::string_view src) : s_(src) {}

  std::shared_ptr<const Grammar> compile() {
    auto g = std::make_shared<Grammar>();
    g_ = g.get();
    g->nodes.push_back(Node{});  // the Root, its child set below
    skip_space(true);
    while (at_ < s_.size()) {
      rule();
      skip_space(true);
    }
    for (const auto& [name, r] : rules_)
      if (!r.defined) fail_at(r.used_at, "rule \"", name, "\" is used but never defined");
    auto root = rules_.find("root");
    if (root == rules_.end()) fail("gbnf: no rule named \"root\" (the text starts there)");
    g->nodes[0].kind = Kind::Root;
    g->nodes[0].items = root->second.node;
    detail::min_lengths(*g);
    for (const auto& [name, r] : rules_)
      if (g->min_len[r.node] >= kInf)
        fail("gbnf: rule \"", name, "\" never ends: every alternative refers to itself again");
    refuse_left_recursion();
    g->start_len = shortest_nonempty(root->second.node);
    if (g->start_len >= kInf)
      fail("gbnf: rule \"root\" writes only the empty text, which cannot be generated");
    g->source = "grammar (GBNF, " + std::to_string(rules_.size()) + " rules)";
    return g;
  }

 private:
  struct Rule {
    int node = -1;
    bool defined = false;
    std::size_t used_at = 0;
  };

  template <class... A>
  [[noreturn]] void fail_at(std::size_t pos, const A&... a) const {
    int line = 1, col = 1;
    for (std::size_t i = 0; i < pos && i < s_.size(); i++) {
      if (s_[i] == '\n')
        line++, col = 1;
      else
        col++;
    }
    fail("gbnf: line ", line, ", column ", col, ": ", a...);
  }

  int add(Node n) {
    g_->nodes.push_back(std::move(n));
    return static_cast<int>(g_->nodes.size()) - 1;
  }
  int rule_node(const std::string& name, std::size_t pos) {
    auto [it, fresh] = rules_.try_emplace(name);
    if (fresh) {
      Node n;
      n.kind = Kind::AnyOf;
      it->second.node = add(std::move(n));
      it->second.used_at = pos;
      names_.resize(g_->nodes.size());
      names_[it->second.node] = name;
    }
    return it->second.node;
  }

  bool more() const { return at_ < s_.size(); }
  char peek() const { return more() ? s_[at_] : '\0'; }
  // Spaces, tabs and comments; newlines too where a rule goes on (after ::= and |, inside
  // parentheses) or between rules.
  void skip_space(bool newlines) {
    while (more()) {
      const char c = s_[at_];
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        at_++;
      } else if (c == '#') {
        while (more() && s_[at_] != '\n') at_++;
      } else {
        break;
      }
    }
  }
  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  }
  std::string name() {
    const std::size_t start = at_;
    while (more() && name_char(s_[at_])) at_++;
    if (at_ == start)
      fail_at(at_, "expected a rule name, found ", string_brief(s_.substr(at_, 12)));
    return std::string(s_.substr(start, at_ - start));
  }

  void rule() {
    const std::size_t pos = at_;
    const std::string n = name();
    skip_space(false);
    if (s_.substr(at_, 3) != "::=") fail_at(at_, "expected ::= after the rule name \"", n, "\"");
    at_ += 3;
    const int node = rule_node(n, pos);
    Rule& r = rules_[n];
    if (r.defined) fail_at(pos, "rule \"", n, "\" is defined twice");
    r.defined = true;
    skip_space(true);
    g_->nodes[node].alts = alternatives(false);
    if (more() && peek() != '\n' && peek() != '\r')
      fail_at(at_, "expected the end of rule \"", n, "\", found ",
              string_brief(s_.substr(at_, 12)));
  }

  std::vector<int> alternatives(bool nested) {
    std::vector<int> alts{sequence(nested)};
    while (peek() == '|') {
      at_++;
      skip_space(true);
      alts.push_back(sequence(nested));
    }
    return alts;
  }

  int sequence(bool nested) {
    Node seq;
    seq.kind = Kind::Seq;
    int last = -2;  // the element a postfix applies to (-1: an empty literal; -2: none yet)
    while (more()) {
      const char c = peek();
      if (c == '|' || c == ')' || c == '\n' || c == '\r') break;
      if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (last == -2) fail_at(at_, "a repetition ", std::string(1, c), " follows nothing");
        if (last >= 0) seq.alts.pop_back();
        last = postfix(last);
        if (last >= 0) seq.alts.push_back(last);
        last = -2;  // one postfix per element, as llama.cpp takes it
      } else {
        last = element();
        if (last >= 0) seq.alts.push_back(last);
      }
      skip_space(nested);
    }
    if (seq.alts.size() == 1) return seq.alts[0];
    return add(std::move(seq));
  }

  // One element; -1 for an empty literal.
  int element() {
    const std::size_t pos = at_;
    int e;
    const char c = peek();
    if (c == '"') {
      at_++;
      std::string text;
      while (more() && peek() != '"') {
        if (peek() == '\n') fail_at(at_, "a literal does not end on its line");
        const std::size_t c_at = at_;
        const uint32_t cp = character();
        if (cp == 0) fail_at(c_at, "a literal holds a NUL character, which no token writes");
        append_utf8(text, cp);
      }
      if (!more()) fail_at(pos, "a literal does not end");
      at_++;
      if (text.empty()) {
        e = -1;
      } else {
        Node lit;
        lit.kind = Kind::Literal;
        lit.texts = {text};
        e = add(std::move(lit));
      }
    } else if (c == '[') {
      e = char_class();
    } else if (c == '.') {
      at_++;
      e = class_node({{0, 0x10FFFF}}, pos);
    } else if (c == '(') {
      at_++;
      skip_space(true);
      Node group;
      group.kind = Kind::AnyOf;
      group.alts = alternatives(true);
      if (peek() != ')') fail_at(pos, "a group \"(\" is not closed");
      at_++;
      e = group.alts.size() == 1 ? group.alts[0] : add(std::move(group));
    } else if (name_char(c)) {
      const std::size_t p = at_;
      e = rule_node(name(), p);
    } else {
      fail_at(at_, "unexpected ", string_brief(s_.substr(at_, 1)));
    }
    return e;
  }

  // The postfix at at_ applied to element e: a Repeat (-1: nothing, for an empty one).
  int postfix(int e) {
    int lo = 1, hi = 1;
    const char c = peek();
    if (c == '*')
      lo = 0, hi = kInf, at_++;
    else if (c == '+')
      lo = 1, hi = kInf, at_++;
    else if (c == '?')
      lo = 0, hi = 1, at_++;
    else
      counts(lo, hi);
    if (e < 0) return -1;  // "" repeated is still empty
    if (hi == 0) return -1;
    Node rep;
    rep.kind = Kind::Repeat;
    rep.items = e, rep.min_items = lo, rep.max_items = hi;
    return add(std::move(rep));
  }
  void counts(int& lo, int& hi) {
    const std::size_t pos = at_++;
    auto number = [&] {
      long v = 0;
      const std::size_t start = at_;
      while (more() && peek() >= '0' && peek() <= '9') {
        v = v * 10 + (peek() - '0');
        if (v > 100000) fail_at(start, "a repetition count above 100000");
        at_++;
      }
      if (at_ == start) fail_at(at_, "expected a number in {m,n}");
      return static_cast<int>(v);
    };
    lo = number();
    hi = lo;
    if (peek() == ',') {
      at_++;
      hi = peek() == '}' ? kInf : number();
    }
    if (peek() != '}') fail_at(pos, "a repetition {m,n} is not closed");
    at_++;
    if (hi < lo) fail_at(pos, "a repetition {", lo, ",", hi, "} has its maximum below its minimum");
  }

  // One character of a literal or class (an escape or UTF-8), as a code point.
  uint32_t character() {
    const std::size_t pos = at_;
    const auto b = static_cast<uint8_t>(s_[at_++]);
    if (b != '\\') {
      if (b < 0x80) return b;
      // UTF-8: the bytes as written
      const int n = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : b >= 0xC0 ? 1 : -1;
      if (n < 0 || at_ + n > s_.size()) fail_at(pos, "invalid UTF-8");
      uint32_t cp = b & (0x3F >> n);
      for (int i = 0; i < n; i++) {
        const auto c = static_cast<uint8_t>(s_[at_++]);
        if ((c & 0xC0) != 0x80) fail_at(pos, "invalid UTF-8");
        cp = cp << 6 | (c & 0x3F);
      }
      return cp;
    }
    if (!more()) fail_at(pos, "an escape \\ at the end");
    const char e = s_[at_++];
    switch (e) {
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
      case '^':
        return static_cast<uint8_t>(e);
      case 'x':
        return hex(2, pos);
      case 'u':
        return hex(4, pos);
      case 'U':
        return hex(8, pos);
      default:
        fail_at(pos, "unknown escape \\", std::string(1, e));
    }
  }
  uint32_t hex(int n, std::size_t pos) {
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
      const char c = peek();
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) fail_at(pos, "expected ", n, " hex digits in the escape");
      v = v << 4 | d, at_++;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
      fail_at(pos, "escape \\u", v, " is not a character a text can hold");
    return v;
  }
  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | cp >> 6), out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | cp >> 12);
      out += static_cast<char>(0x80 | (cp >> 6 & 0x3F)),
          out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | cp >> 18), out += static_cast<char>(0x80 | (cp >> 12 & 0x3F));
      out += static_cast<char>(0x80 | (cp >> 6 & 0x3F)),
          out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // Closed ranges of code points.
  using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;
  using ByteSeq = std::vector<std::pair<uint8_t, uint8_t>>;  // a byte range per position

  int char_class() {
    const std::size_t pos = at_++;
    const bool negated = peek() == '^';
    if (negated) at_++;
    Ranges rs;
    while (more() && peek() != ']') {
      if (peek() == '\n') fail_at(pos, "a class [...] does not end on its line");
      const uint32_t a = character();
      uint32_t b = a;
      if (peek() == '-' && at_ + 1 < s_.size() && s_[at_ + 1] != ']') {
        at_++;
        b = character();
        if (b < a) fail_at(pos, "a class range ends below where it starts");
      }
      rs.emplace_back(a, b);
    }
    if (!more()) fail_at(pos, "a class [...] is not closed");
    at_++;
    return class_node(negated ? complement(rs) : rs, pos);
  }
  static Ranges complement(Ranges rs) {
    std::sort(rs.begin(), rs.end());
    Ranges out;
    uint32_t next = 0;
    for (const auto& [a, b] : rs) {
      if (a > next) out.emplace_back(next, a - 1);
      next = std::max(next, b + 1);
    }
    if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
    return out;
  }

  // The characters of rs: a Chars node of their ASCII bytes and, for the others, the byte
  // ranges of their UTF-8 texts, one Seq per run of texts that share a shape.
  int class_node(const Ranges& rs, std::size_t pos) {
    Node ascii;
    ascii.kind = Kind::Chars;
    std::vector<ByteSeq> seqs;
    for (const auto& [a, b] : rs) {
      for (uint32_t c = a; c <= std::min<uint32_t>(b, 0x7F); c++)
        ascii.chars[c >> 6] |= uint64_t(1) << (c & 63);
      if (b >= 0x80) utf8_seqs(std::max<uint32_t>(a, 0x80), std::min<uint32_t>(b, 0x10FFFF), seqs);
    }
    Node any;
    any.kind = Kind::AnyOf;
    if (ascii.chars[0] | ascii.chars[1]) any.alts.push_back(add(std::move(ascii)));
    for (const ByteSeq& q : seqs) {
      Node seq;
      seq.kind = Kind::Seq;
      for (const auto& [lo, hi] : q) seq.alts.push_back(byte_range(lo, hi));
      any.alts.push_back(q.size() == 1 ? seq.alts[0] : add(std::move(seq)));
    }
    if (any.alts.empty()) fail_at(pos, "a class that takes no character");
    return any.alts.size() == 1 ? any.alts[0] : add(std::move(any));
  }
  int byte_range(uint8_t lo, uint8_t hi) {
    auto [it, fresh] = byte_ranges_.try_emplace(lo << 8 | hi, -1);
    if (fresh) {
      Node n;
      n.kind = Kind::Chars;
      for (int c = lo; c <= hi; c++) n.chars[c >> 6] |= uint64_t(1) << (c & 63);
      it->second = add(std::move(n));
    }
    return it->second;
  }
  // The UTF-8 texts of code points lo..hi (>= 0x80; surrogates left out) as byte-range
  // sequences: first split where the length changes, then byte by byte.
  static void utf8_seqs(uint32_t lo, uint32_t hi, std::vector<ByteSeq>& out) {
    if (lo > hi) return;
    if (lo <= 0xDFFF && hi >= 0xD800) {
      if (lo < 0xD800) utf8_seqs(lo, 0xD7FF, out);
      if (hi > 0xDFFF) utf8_seqs(0xE000, hi, out);
      return;
    }
    for (uint32_t edge : {0x7FFu, 0xFFFFu})
      if (lo <= edge && hi > edge) {
        utf8_seqs(lo, edge, out);
        utf8_seqs(edge + 1, hi, out);
        return;
      }
    std::string l, h;
    append_utf8(l, lo), append_utf8(h, hi);
    split(l, h, 0, {}, out);
  }
  // The byte ranges of the texts from l to h (of one length), from byte i on.
  static void split(std::string l, std::string h, std::size_t i, ByteSeq prefix,
                    std::vector<ByteSeq>& out) {
    const auto L = [&](std::size_t k) { return static_cast<uint8_t>(l[k]); };
    const auto H = [&](std::size_t k) { return static_cast<uint8_t>(h[k]); };
    const std::size_t n = l.size();
    if (i + 1 == n || L(i) == H(i)) {
      prefix.emplace_back(L(i), H(i));
      if (i + 1 == n) return out.push_back(prefix);
      return split(l, h, i + 1, prefix, out);
    }
    bool lo_full = true, hi_full = true;  // the rest of l is its least, of h its greatest
    for (std::size_t k = i + 1; k < n; k++) lo_full &= L(k) == 0x80, hi_full &= H(k) == 0xBF;
    int a = L(i), b = H(i);
    if (!lo_full) {
      std::string top = l;
      for (std::size_t k = i + 1; k < n; k++) top[k] = static_cast<char>(0xBF);
      split(l, top, i, prefix, out);
      a++;
    }
    if (!hi_full) b--;
    if (a <= b) {
      ByteSeq mid = prefix;
      mid.emplace_back(a, b);
      for (std::size_t k = i + 1; k < n; k++) mid.emplace_back(0x80, 0xBF);
      out.push_back(mid);
    }
    if (!hi_full) {
      std::string bottom = h;
      for (std::size_t k = i + 1; k < n; k++) bottom[k] = static_cast<char>(0x80);
      split(bottom, h, i, prefix, out);
    }
  }

  // The shortest text of node n that is not empty (kInf: it has none), by iterating to a
  // fixed point as min_lengths does (rules may loop).
  int shortest_nonempty(int n) const {
    const auto& nodes = g_->nodes;
    const auto& m = g_->min_len;
    std::vector<long> ne(nodes.size(), kInf);
    for (bool changed = true; changed;) {
      changed = false;
      for (std::size_t i = 0; i < nodes.size(); i++) {
        const Node& nd = nodes[i];
        long v = kInf;
        if (nd.kind == Kind::Chars || nd.kind == Kind::Literal) v = m[i];
        if (nd.kind == Kind::AnyOf)
          for (int a : nd.alts) v = std::min(v, ne[a]);
        if (nd.kind == Kind::Seq) {
          long sum = 0;
          for (int e : nd.alts) sum += m[e];
          if (sum > 0) v = std::min<long>(sum, kInf);
          for (int e : nd.alts)  // all empty but one
            if (sum == 0) v = std::min(v, ne[e]);
        }
        if (nd.kind == Kind::Repeat && nd.max_items > 0) {
          if (m[i] > 0)
            v = m[i];
          else
            v = ne[nd.items];  // one repetition not empty, the others empty
        }
        if (v < ne[i]) ne[i] = v, changed = true;
      }
    }
    return static_cast<int>(std::min<long>(ne[n], kInf));
  }

  // A rule that can reach itself before any byte is written would recurse forever in the
  // matcher: found by a search over "may start with" edges.
  void refuse_left_recursion() const {
    const auto& nodes = g_->nodes;
    const auto& m = g_->min_len;
    auto firsts = [&](int n) {
      std::vector<int> out;
      const Node& nd = nodes[n];
      if (nd.kind == Kind::AnyOf) out = nd.alts;
      if (nd.kind == Kind::Repeat) out = {nd.items};
      if (nd.kind == Kind::Seq)
        for (int e : nd.alts) {
          out.push_back(e);
          if (m[e] > 0) break;
        }
      return out;
    };
    std::vector<int> color(nodes.size(), 0), path;
    std::function<void(int)> visit = [&](int n) {
      color[n] = 1;
      path.push_back(n);
      for (int f : firsts(n)) {
        if (color[f] == 1) {
          std::string cycle;
          for (std::size_t i = 0; i < path.size(); i++)
            if (static_cast<std::size_t>(path[i]) < names_.size() && !names_[path[i]].empty())
              cycle += (cycle.empty() ? "" : " -> ") + names_[path[i]];
          fail("gbnf: left recursion (", cycle.empty() ? std::string("a group") : cycle,
               " -> ...): a rule can reach itself before writing a byte; write it as a "
               "repetition, e.g. expr ::= term (\"+\" term)*");
        }
        if (color[f] == 0) visit(f);
      }
      path.pop_back();
      color[n] = 2;
    };
    for (std::size_t n = 0; n < nodes.size(); n++)
      if (color[n] == 0) visit(static_cast<int>(n));
  }

  std::string_view s_;
  std::size_t at_ = 0;
  Grammar* g_ = nullptr;
  std::map<std::string, Rule> rules_;
  std::vector<std::string> names_;  // (nodes) a rule's name, for messages
  std::map<int, int> byte_ranges_;  // lo << 8 | hi -> its Chars node
};

}  // namespace gbnf

// A text that the GBNF grammar's rule "root" generates.
inline std::shared_ptr<const Grammar> compile_gbnf(std::string_view text) {
  return gbnf::Parser(text).compile();
}

}  // namespace servekit::constrain
