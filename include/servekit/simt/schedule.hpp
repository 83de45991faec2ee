// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// The order in which the emulator runs a block's ready threads. CUDA promises no order between
// the threads of a block outside barriers and warp ops, so every order is a schedule a GPU may
// run; a kernel whose result depends on it has a race. The default, FIFO, runs thread 0 to its
// first wait, then thread 1, ...: a missing __syncthreads() between "thread t writes" and
// "thread t + 1 reads" passes by luck. Reverse (the last ready thread first) and Random (a
// seeded shuffle per block) run the same kernels in other valid orders, so such a race shows.
//
//   simt::set_schedule({simt::Order::Reverse});      // or the environment, read at start:
//   SERVEKIT_SIMT_SCHEDULE=fifo | reverse | random[:SEED]
#include "servekit/simt/platform.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "servekit/core/error.hpp"

namespace servekit::simt {
inline namespace SERVEKIT_DEVICE_ABI {

enum class Order : std::uint8_t { Fifo, Reverse, Random };

struct Schedule {
  Order order = Order::Fifo;
  std::uint64_t seed = 0;  // Random: blocks are shuffled by (seed, block index)
};

// "fifo", "reverse", "random" or "random:SEED"; anything else is an error naming the text.
inline Schedule parse_schedule(std::string_view s) {
  if (s == "fifo") return {Order::Fifo};
  if (s == "reverse") return {Order::Reverse};
  if (s == "random") return {Order::Random, 1};
  if (s.starts_with("random:") && s.size() > 7) {
    const std::string digits(s.substr(7));
    char* end = nullptr;
    const unsigned long long v = std::strtoull(digits.c_str(), &end, 10);
    if (end && *end == '\0' && digits.find_first_not_of("0123456789") == std::string::npos)
      return {Order::Random, v};
  }
  fail("SERVEKIT_SIMT_SCHEDULE: '", s, "' is not fifo, reverse, random or random:SEED");
}

namespace detail {
inline Schedule& schedule_setting() {
  static Schedule s = [] {
    const char* e = std::getenv("SERVEKIT_SIMT_SCHEDULE");
    return e && *e ? parse_schedule(e) : Schedule{};
  }();
  return s;
}
}  // namespace detail

// Applies to launches that start after it; not while a launch runs.
inline void set_schedule(Schedule s) {
  detail::schedule_setting() = s;
}
inline Schedule schedule() {
  return detail::schedule_setting();
}

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::simt
