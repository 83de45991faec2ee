// SPDX-License-Identifier: Apache-2.0
// The host kernels' pool: every index runs exactly once, whatever the sizes, grains, thread
// counts, nesting and concurrent callers; results are visible to the caller on return.
#include <atomic>
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "servekit/core/thread_pool.hpp"

using servekit::ThreadPool;

namespace {
// Runs n indices on the pool and checks each ran once (counts stay per index, no atomics
// needed: a chunk is one thread's).
void check_once(ThreadPool& pool, int n, int grain) {
  std::vector<int> hits(n, 0);
  pool.parallel_for(
      n, [&](int i) { hits[i]++; }, grain);
  int wrong = 0;
  for (int h : hits) wrong += h != 1;
  INFO("n " << n << " grain " << grain << " threads " << pool.threads());
  CHECK(wrong == 0);
}
}  // namespace

TEST_CASE("every index runs exactly once") {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    CHECK(pool.threads() == threads);
    for (int n : {0, 1, 2, 7, 64, 1000, 4097})
      for (int grain : {0, 1, 3, 5000}) check_once(pool, n, grain);
  }
}

TEST_CASE("many jobs back to back, with workers parking between some") {
  ThreadPool pool(4);
  std::vector<long> v(5000);
  long wrong = 0;
  for (int it = 0; it < 3000; it++) {
    const int n = 1 + (it * 7919) % 5000;
    pool.parallel_for(
        n, [&](int i) { v[i] = long(i) * it; }, it % 4);
    for (int i = 0; i < n; i++) wrong += v[i] != long(i) * it;
    if (it % 1000 == 999) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  CHECK(wrong == 0);
}

TEST_CASE("a loop inside a loop runs on its caller") {
  ThreadPool pool(3);
  std::atomic<int> inner{0};
  pool.parallel_for(
      6,
      [&](int) {
        pool.parallel_for(
            5, [&](int) { inner++; }, 1);
      },
      1);
  CHECK(inner == 30);
}

TEST_CASE("two threads using one pool at once both finish with every index once") {
  ThreadPool pool(2);
  std::atomic<long> wrong{0};
  auto caller = [&](int seed) {
    std::vector<int> hits(3000);
    for (int it = 0; it < 300; it++) {
      std::fill(hits.begin(), hits.end(), 0);
      const int n = 100 + (it * 31 + seed) % 2900;
      pool.parallel_for(
          n, [&](int i) { hits[i]++; }, 1 + it % 7);
      for (int i = 0; i < n; i++) wrong += hits[i] != 1;
    }
  };
  std::thread a(caller, 1), b(caller, 2);
  a.join();
  b.join();
  CHECK(wrong == 0);
}

TEST_CASE("resize between loops") {
  ThreadPool pool(1);
  for (int t : {4, 1, 2}) {
    pool.resize(t);
    CHECK(pool.threads() == t);
    check_once(pool, 999, 0);
  }
}

TEST_CASE("the host pool follows set_host_threads") {
  const int before = servekit::host_threads();
  CHECK(before >= 1);
  servekit::set_host_threads(3);
  CHECK(servekit::host_threads() == 3);
  std::vector<int> hits(100);
  servekit::parallel_for(100, [&](int i) { hits[i]++; });
  CHECK(std::count(hits.begin(), hits.end(), 1) == 100);
  servekit::set_host_threads(before);
}
