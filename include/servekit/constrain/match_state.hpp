// SPDX-License-Identifier: Apache-2.0
#pragma once
// The matcher's state (constrain/matcher.hpp): frames, threads of frames and the set of threads
// still alive, kept as plain bytes so that a state is its own cache key (constrain/token_mask.hpp)
// and copies cheaply while a token's bytes are tried; and the phases a frame can be in.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace servekit::constrain {

inline constexpr int kMaxDepth = 24;  // open values; deeper ones are not started

// 24 bytes, no padding: a state's bytes are its identity.
struct Frame {
  int32_t node;
  uint8_t phase;
  uint8_t a, b, c;  // string: continuation bytes due and the next one's range; integer and
                    // bounded number: sign (a), the number's integer digits past its '.' (b)
  int32_t count;    // string: characters (capped); array: items; key/literal: bytes matched;
                    // number/integer: digits of the current part
  int32_t which;    // object: the property being written (-1: another key); literal: the text
  uint64_t bits;    // object: properties seen; string: pattern positions; integer: magnitude;
                    // bounded number: its digits as one integer
};
static_assert(sizeof(Frame) == 24);

struct Thread {
  int32_t n = 0, pad_ = 0;
  Frame f[kMaxDepth];
  Frame& top() { return f[n - 1]; }
  const Frame& top() const { return f[n - 1]; }
  void copy_from(const Thread& o) {
    n = o.n;
    std::memcpy(f, o.f, sizeof(Frame) * o.n);
  }
  bool same(const Thread& o) const {
    return n == o.n && std::memcmp(f, o.f, sizeof(Frame) * n) == 0;
  }
};

// A set of threads; slots are kept between uses so that feeding allocates nothing once warm.
struct State {
  std::vector<Thread> t;
  int size = 0;
  void clear() { size = 0; }
  bool dead() const { return size == 0; }
  Thread& add() {
    if (size == static_cast<int>(t.size())) t.emplace_back();
    return t[size++];
  }
  void copy_from(const State& o) {
    clear();
    for (int i = 0; i < o.size; i++) add().copy_from(o.t[i]);
  }
  // The bytes that identify it (threads in order).
  void key(std::string& out) const {
    out.clear();
    for (int i = 0; i < size; i++) {
      out.append(reinterpret_cast<const char*>(&t[i].n), sizeof(int32_t));
      out.append(reinterpret_cast<const char*>(t[i].f), sizeof(Frame) * t[i].n);
    }
  }
};

namespace phase {
// Root
constexpr uint8_t R_START = 0, R_IN = 1, R_DONE = 2;
// Object: after '{'; writing listed key `which`; a child string is another key; ':' next;
// after ':'; after ': '; a child is the value; after a value; after ','; after ', '
constexpr uint8_t O_OPEN = 0, O_KEY = 1, O_KEYSTR = 2, O_COLON = 3, O_AFTER_COLON = 4,
                  O_COLON_SP = 5, O_IN = 6, O_AFTER_VALUE = 7, O_COMMA = 8, O_COMMA_SP = 9;
// Array
constexpr uint8_t A_OPEN = 0, A_IN = 1, A_AFTER_VALUE = 2, A_COMMA = 3, A_COMMA_SP = 4;
// String: characters; after '\'; \u and `a` hex digits; a UTF-8 character's continuation
constexpr uint8_t S_BODY = 0, S_ESC = 1, S_HEX = 2, S_CONT = 3;
// Integer: after '-'; a lone 0; digits
constexpr uint8_t I_MINUS = 0, I_ZERO = 1, I_DIGITS = 2;
// Number
constexpr uint8_t N_MINUS = 0, N_ZERO = 1, N_INT = 2, N_DOT = 3, N_FRAC = 4, N_E = 5, N_ESIGN = 6,
                  N_EXP = 7;
}  // namespace phase

}  // namespace servekit::constrain
