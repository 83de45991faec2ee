// SPDX-License-Identifier: Apache-2.0
#pragma once
// What each token of a vocabulary does inside a JSON string's body (no pattern, right after a
// whole character): it stays inside, adding `chars` characters and leaving `tail` bytes of an
// escape or a UTF-8 character due; or it closes the string after `chars` characters and goes on
// with the bytes after the quote; or it breaks the string.
//
// A string body is the same language in every grammar, so this is worked out once per
// vocabulary, by the matcher itself on a grammar of one long string. A thread inside a string
// then gets its mask as a copy of the tokens that stay inside (those that fit the string's
// length) plus the few that close it, which alone need what encloses the string: XGrammar's
// split of context-independent tokens from context-dependent ones, made once for every grammar
// (token_mask.hpp). Strings with a pattern walk the vocabulary as any other value does.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "servekit/constrain/finish_length.hpp"
#include "servekit/constrain/grammar.hpp"
#include "servekit/constrain/matcher.hpp"
#include "servekit/constrain/sorted_strings.hpp"

namespace servekit::constrain {

struct StringTokens {
  struct Inside {
    int32_t id;
    uint16_t chars;
    uint8_t tail;  // bytes still due: 1 after '\', 4 - k after \u and k hex digits, the
                   // continuation bytes of a UTF-8 character
  };
  struct Closer {
    int32_t id;
    uint16_t chars;  // before the quote
  };
  static constexpr int kTails = 5;

  int words = 0;
  std::vector<Inside> inside;               // sorted by chars
  std::vector<std::vector<uint32_t>> upto;  // [k] (words): the inside tokens of <= k chars
  int cmin[kTails];                         // fewest chars of an inside token with that tail
  SortedStrings after;                      // (groups) what follows a closing quote
  std::vector<uint32_t> group_off;          // (groups + 1) into closers
  std::vector<Closer> closers;              // by group

  int max_chars() const { return static_cast<int>(upto.size()) - 1; }

  // tokens: (id, bytes) for ids < V, the end-of-text token left out.
  static StringTokens of(const std::vector<std::pair<int32_t, std::string_view>>& tokens, int V) {
    StringTokens st;
    st.words = (V + 31) / 32;
    std::fill(std::begin(st.cmin), std::end(st.cmin), kInf);
    const auto g =
        compile_json_schema(std::string_view(R"({"type": "string", "maxLength": 1000000})"));
    Matcher m(*g);
    State open, s, next;
    m.start(s);
    m.feed(s, '"', open);
    std::map<std::string_view, std::vector<Closer>> groups;
    for (const auto& [id, bytes] : tokens) {
      s.copy_from(open);
      int chars = 0;
      bool closed = false;
      for (std::size_t i = 0; i < bytes.size() && !closed; i++) {
        chars = s.t[0].top().count;
        m.feed(s, static_cast<uint8_t>(bytes[i]), next);
        std::swap(s, next);
        if (s.dead()) break;
        if (s.t[0].n == 1) {  // the root's string ended: the quote was byte i
          groups[bytes.substr(i + 1)].push_back({id, static_cast<uint16_t>(chars)});
          closed = true;
        }
      }
      if (closed || s.dead() || bytes.empty()) continue;
      const Frame& f = s.t[0].top();
      const int tail = static_cast<int>(finish::rest(*g, f)) - 1;  // minLength 0: the rest is due
      st.inside.push_back(
          {id, static_cast<uint16_t>(std::min(f.count, 65535)), static_cast<uint8_t>(tail)});
      st.cmin[tail] = std::min(st.cmin[tail], f.count);
    }
    std::stable_sort(st.inside.begin(), st.inside.end(),
                     [](const Inside& a, const Inside& b) { return a.chars < b.chars; });
    const int kmax = st.inside.empty() ? 0 : st.inside.back().chars;
    st.upto.assign(kmax + 1, std::vector<uint32_t>(st.words, 0));
    std::size_t j = 0;
    for (int k = 0; k <= kmax; k++) {
      if (k > 0) st.upto[k] = st.upto[k - 1];
      for (; j < st.inside.size() && st.inside[j].chars == k; j++)
        st.upto[k][st.inside[j].id >> 5] |= 1u << (st.inside[j].id & 31);
    }
    std::vector<std::string_view> keys;
    st.group_off.push_back(0);
    for (const auto& [rest, cs] : groups) {  // std::map: in byte order
      keys.push_back(rest);
      st.closers.insert(st.closers.end(), cs.begin(), cs.end());
      st.group_off.push_back(static_cast<uint32_t>(st.closers.size()));
    }
    st.after = SortedStrings::of(keys);
    return st;
  }
};

}  // namespace servekit::constrain
