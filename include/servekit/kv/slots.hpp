// SPDX-License-Identifier: Apache-2.0
#pragma once
// Slot bookkeeping shared by every layout: which slots a scheduler holds, and how many rows of
// each slot hold keys and values.
#include <cstdint>
#include <span>
#include <vector>

#include "servekit/core/error.hpp"

namespace servekit::kv {

// One slot's rows after a step: rows 0..rows-1 hold keys and values once the kernels ran.
struct Reserve {
  int32_t slot;
  int32_t rows;
};

class Slots {
 public:
  explicit Slots(int slots) : n_(slots), length_(slots, 0), held_(slots, 0) {
    if (slots < 1) fail("kv cache: slots must be >= 1, got ", slots);
    free_.reserve(slots);
    for (int s = slots - 1; s >= 0; s--) free_.push_back(s);
  }

  // An exhausted cache is an error, never a silent overwrite.
  int acquire() {
    if (free_.empty()) fail("kv cache: all ", n_, " slots are in use");
    const int s = free_.back();
    free_.pop_back();
    held_[s] = 1;
    return s;
  }
  // Forgets the slot's rows; a slot used without acquire() is released all the same.
  void release(int slot) {
    check(slot, "release of");
    length_[slot] = 0;
    if (held_[slot]) {
      held_[slot] = 0;
      free_.push_back(slot);
    }
  }
  void check(int slot, const char* what) const {
    if (slot < 0 || slot >= n_) fail("kv cache: ", what, " slot ", slot, " outside [0, ", n_, ")");
  }

  int slots() const { return n_; }
  int free_slots() const { return static_cast<int>(free_.size()); }
  int32_t length(int slot) const { return length_[slot]; }
  void set_length(int slot, int32_t rows) { length_[slot] = rows; }
  long stored() const {
    long n = 0;
    for (int32_t l : length_) n += l;
    return n;
  }
  int in_use() const {
    int n = 0;
    for (int32_t l : length_) n += l > 0;
    return n;
  }

 private:
  int n_;
  std::vector<int32_t> length_;
  std::vector<uint8_t> held_;
  std::vector<int> free_;
};

}  // namespace servekit::kv
