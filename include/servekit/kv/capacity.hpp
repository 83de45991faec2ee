// SPDX-License-Identifier: Apache-2.0
#pragma once
// Capacity of a KV cache in bytes and tokens. One cached token costs
//   2 (K and V) x layers x d_model x bytes per element
// in every layout; layouts differ in how many rows a sequence reserves beyond the ones it
// stores (contiguous: max_len - length per slot in use; paged: the unused tail of each last
// block).
#include <cstddef>
#include <ostream>
#include <string>

namespace servekit::kv {

struct Capacity {
  std::string layout;               // the policy's name, e.g. "paged16-f16"
  std::size_t bytes_per_token = 0;  // 2 x n_layer x n_embd x sizeof(element)
  std::size_t bytes = 0;            // the whole cache: capacity_tokens x bytes_per_token
  long capacity_tokens = 0;         // rows the cache can hold (slots x max_len or blocks x B)
  long reserved_tokens = 0;         // rows held by sequences in use
  long stored_tokens = 0;           // rows holding a key and value (sum of lengths)
  int sequences = 0;                // slots holding at least one row

  long waste_tokens() const { return reserved_tokens - stored_tokens; }
  std::size_t waste_bytes() const { return waste_tokens() * bytes_per_token; }
  long free_tokens() const { return capacity_tokens - reserved_tokens; }
  // Stored / reserved: 1 when every reserved row holds a token (and when nothing is reserved).
  double utilisation() const {
    return reserved_tokens == 0 ? 1.0 : static_cast<double>(stored_tokens) / reserved_tokens;
  }
};

inline std::ostream& operator<<(std::ostream& os, const Capacity& c) {
  const double mib = 1.0 / (1024.0 * 1024.0);
  os << "kv cache " << c.layout << ": " << c.bytes_per_token << " B/token, " << c.capacity_tokens
     << " tokens (" << c.bytes * mib << " MiB); " << c.sequences << " sequences store "
     << c.stored_tokens << " tokens in " << c.reserved_tokens << " reserved: utilisation "
     << 100.0 * c.utilisation() << "%, waste " << c.waste_tokens() << " tokens ("
     << c.waste_bytes() * mib << " MiB)";
  return os;
}

}  // namespace servekit::kv
