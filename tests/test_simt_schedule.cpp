// SPDX-License-Identifier: Apache-2.0
// The emulator's schedule orders (simt/schedule.hpp) and static shared memory poisoning
// (SERVEKIT_SHARED): a race that the default FIFO order hides shows up in another valid order,
// shared memory read before it is written holds garbage as on a GPU, and race-free kernels give
// the same results in every order.
#include <catch2/catch.hpp>

#include <vector>

#include "servekit/core/error.hpp"
#include "test_simt_schedule_kernels.hpp"

namespace simt = servekit::simt;
using namespace simt_test;

namespace {
// Runs f with schedule s, then puts the previous one back.
template <class F>
void with_schedule(simt::Schedule s, F f) {
  const simt::Schedule before = simt::schedule();
  simt::set_schedule(s);
  try {
    f();
  } catch (...) {
    simt::set_schedule(before);
    throw;
  }
  simt::set_schedule(before);
}

template <bool kBarrier>
std::vector<int> run_left_neighbour(int blocks, int threads) {
  simt::DeviceBuffer<int> d(static_cast<std::size_t>(blocks) * threads);
  simt::launch(simt::kernel<left_neighbour<kBarrier>>, dim3(blocks), dim3(threads), 0, nullptr,
               d.data());
  std::vector<int> out(d.size());
  d.download(out);
  return out;
}

int count_wrong(const std::vector<int>& out, int threads) {
  int wrong = 0;
  for (std::size_t i = 0; i < out.size(); i++) {
    const int b = static_cast<int>(i) / threads, t = static_cast<int>(i) % threads;
    wrong += out[i] != (t > 0 ? 10 * (t - 1) + b : -1);
  }
  return wrong;
}

const simt::Schedule kOrders[] = {{simt::Order::Fifo},
                                  {simt::Order::Reverse},
                                  {simt::Order::Random, 1},
                                  {simt::Order::Random, 7}};
}  // namespace

TEST_CASE("schedules parse from their names, and a bad one is named", "[simt]") {
  CHECK(simt::parse_schedule("fifo").order == simt::Order::Fifo);
  CHECK(simt::parse_schedule("reverse").order == simt::Order::Reverse);
  CHECK(simt::parse_schedule("random").order == simt::Order::Random);
  const auto r = simt::parse_schedule("random:42");
  CHECK((r.order == simt::Order::Random && r.seed == 42));
  for (const char* bad : {"", "lifo", "random:", "random:x1", "random:-3", "fifo "})
    CHECK_THROWS_WITH(simt::parse_schedule(bad),
                      Catch::Contains("SERVEKIT_SIMT_SCHEDULE") && Catch::Contains(bad));
}

TEST_CASE("a missing barrier that FIFO order hides shows up reversed and shuffled", "[simt]") {
  constexpr int kBlocks = 3, kThreads = 256;
  int fifo = -1, reverse = -1, shuffled = -1;
  with_schedule({simt::Order::Fifo}, [&] {
    fifo = count_wrong(run_left_neighbour<false>(kBlocks, kThreads), kThreads);
  });
  with_schedule({simt::Order::Reverse}, [&] {
    reverse = count_wrong(run_left_neighbour<false>(kBlocks, kThreads), kThreads);
  });
  with_schedule({simt::Order::Random, 3}, [&] {
    shuffled = count_wrong(run_left_neighbour<false>(kBlocks, kThreads), kThreads);
  });
  CHECK(fifo == 0);                                // the bug passes by luck in FIFO order
  CHECK(reverse == kBlocks * (kThreads - 1));      // every read precedes its write
  CHECK(shuffled > kBlocks * (kThreads - 1) / 4);  // about half of them, seeded
}

TEST_CASE("the fixed kernels give the same results in every order", "[simt]") {
  for (const auto& s : kOrders) {
    INFO("order " << static_cast<int>(s.order) << " seed " << s.seed);
    with_schedule(s, [&] {
      CHECK(count_wrong(run_left_neighbour<true>(5, 256), 256) == 0);
      CHECK(count_wrong(run_left_neighbour<true>(2, 77), 77) == 0);
      simt::DeviceBuffer<int> d(9);
      simt::launch(simt::kernel<block_total<true>>, dim3(9), dim3(100), 0, nullptr, d.data());
      std::vector<int> out(9);
      d.download(out);
      for (int v : out) CHECK(v == 100 * 101 / 2);
    });
  }
}

TEST_CASE("static shared memory starts each block as garbage, as on a GPU", "[simt]") {
  // Without zeroing, a thread_local accumulator would start at 0 in the first block and carry
  // the previous block's sum into the next; poisoned, every block's sum is off.
  simt::DeviceBuffer<int> d(6);
  simt::launch(simt::kernel<block_total<false>>, dim3(6), dim3(64), 0, nullptr, d.data());
  std::vector<int> out(6);
  d.download(out);
  for (int v : out) CHECK(v == -1 + 64 * 65 / 2);  // 0xffffffff, then the adds
}

TEST_CASE("a random schedule is the same for a block whichever thread runs it", "[simt]") {
  std::vector<int> a, b;
  with_schedule({simt::Order::Random, 11}, [&] {
    simt::set_host_workers(1);
    a = run_left_neighbour<false>(8, 64);
    simt::set_host_workers(2);
    b = run_left_neighbour<false>(8, 64);
    simt::set_host_workers(0);
  });
  CHECK(a == b);
  CHECK(count_wrong(a, 64) > 0);
}
