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
// (constrain/text_grammar.hpp).
enum class Kind : uint8_t { Root, Object, Array, String, Integer, Number, Literal, AnyOf, Text };

struct Property {
  std::string key;  // as written, quotes included: "name"
  int value;        // node
};

struct Node {
  Kind kind = Kind::Root;
  // Object
  std::vector<Property> props;
  uint64_t required = 0;  // bit i: props[i]
  int additional = -1;    // node of other keys' values; -1: none allowed
  // Array: prefix[k] is position k's item (prefixItems), items every later one's
  int items = -1, min_items = 0, max_items = kInf;
  std::vector<int> prefix;
  // String (and Text: its pattern)
  int min_len = 0, max_len = kInf, pattern = -1;
  // Integer: the closed range
  int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  // Literal: the texts (enum, const, true, false, null); AnyOf: the alternatives
  std::vector<std::string> texts;
  std::vector<int> alts;

  int item_at(long k) const { return k < static_cast<long>(prefix.size()) ? prefix[k] : items; }

  bool bounded() const {
    return lo != std::numeric_limits<int64_t>::min() || hi != std::numeric_limits<int64_t>::max();
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
  std::string source;        // the schema, for messages

  // The mask cache is shared by every request with this grammar (and guarded: engines may
  // share it).
  mutable std::mutex cache_mu;
  mutable std::map<const void*, std::shared_ptr<MaskCacheSlot>> caches;
};

}  // namespace servekit::constrain
