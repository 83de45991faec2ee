// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a JSON schema compiles into (constrain/grammar.hpp): a graph of value shapes, one node
// per shape, which the matcher (constrain/matcher.hpp) walks byte by byte, and the shortest
// text of each node, which tells the matcher when a value can still end in time.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "servekit/constrain/pattern.hpp"

namespace servekit::constrain {

// Text: a whole text (not JSON) that a pattern matches, a regex constraint's
// (constrain/text_grammar.hpp). Seq, Repeat, Chars: a context-free grammar's (constrain/gbnf.hpp):
// its elements in order, an element repeated, one byte of a set; rules are AnyOf nodes.
enum class Kind : uint8_t {
  Root,
  Object,
  Array,
  String,
  Integer,
  Number,
  Literal,
  AnyOf,
  Text,
  Seq,
  Repeat,
  Chars
};

// 1e34 units (constrain/number_range.hpp): past any number a bounded one can be written as.
inline constexpr __int128 kNumCap =
    static_cast<__int128>(10'000'000'000'000'000) * 1'000'000'000'000'000'000;

// A number's range and step in units of 1e-18 (constrain/number_range.hpp); step 0: any.
struct DecimalRange {
  __int128 lo = -kNumCap, hi = kNumCap, step = 0;
  bool any() const { return lo != -kNumCap || hi != kNumCap || step != 0; }
};

struct Property {
  std::string key;  // as written, quotes included: "name"
  int value;        // node
};

// patternProperties: a key that the String node `key` (with the pattern) matches takes a value
// of node `value`.
struct PatternProperty {
  int key, value;
};

struct Node {
  Kind kind = Kind::Root;
  // Object
  std::vector<Property> props;
  uint64_t required = 0;                       // bit i: props[i]
  int additional = -1;                         // node of other keys' values; -1: none allowed
  std::vector<PatternProperty> pattern_props;  // keys by pattern (disjoint, and from props)
  // Array: prefix[k] is position k's item (prefixItems), items every later one's; Repeat: its
  // element is items, min_items..max_items times
  int items = -1, min_items = 0, max_items = kInf;
  std::vector<int> prefix;
  bool unique = false;  // uniqueItems: items is a Literal whose texts each appear once at most
  // String (and Text: its pattern)
  int min_len = 0, max_len = kInf, pattern = -1;
  // Integer: the closed range, and a step its values are multiples of (0: any)
  int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  int64_t multiple = 0;
  // Number: its range (a bounded number is written without an exponent)
  DecimalRange num;
  // Literal: the texts (enum, const, true, false, null); AnyOf: the alternatives; Seq: the
  // elements, in order
  std::vector<std::string> texts;
  std::vector<int> alts;
  // Chars: bit b of word b / 64: byte b
  uint64_t chars[4] = {0, 0, 0, 0};
  bool has_byte(uint8_t b) const { return chars[b >> 6] >> (b & 63) & 1; }

  int item_at(long k) const { return k < static_cast<long>(prefix.size()) ? prefix[k] : items; }

  bool bounded() const {
    return lo != std::numeric_limits<int64_t>::min() || hi != std::numeric_limits<int64_t>::max() ||
           multiple != 0;
  }
  // The count a string's state keeps: past this, more characters change nothing.
  int len_cap() const { return max_len < kInf ? max_len : min_len; }
};

// Masks cached per matcher state, per vocabulary (constrain/token_mask.hpp fills it).
struct MaskCacheSlot;

class Grammar {
 public:
  std::vector<Node> nodes;
  std::vector<Pattern> patterns;
  std::vector<int> min_len;  // (nodes) bytes of the shortest text of each node
  int root = 0;              // a Root node
  int key_node = -1;         // any string: the keys of additionalProperties
  // The shortest text a generation can write, where the root's child may be empty (GBNF): an
  // empty text cannot be generated. -1: min_len of the root's child.
  int start_len = -1;
  std::string source;  // the schema, for messages

  // The mask cache is shared by every request with this grammar (and guarded: engines may
  // share it).
  mutable std::mutex cache_mu;
  mutable std::map<const void*, std::shared_ptr<MaskCacheSlot>> caches;
};

}  // namespace servekit::constrain
