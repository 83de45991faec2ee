// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// Runs one thread block on the calling OS thread: each CUDA thread is a fiber, and the fibers
// take turns. A thread runs until it waits (a __syncthreads, a warp-level op) or returns; then
// the next ready thread runs. Ready threads wait in a queue taken in FIFO order (or reversed, or
// shuffled: simt/schedule.hpp), so a switch costs O(1) and a block whose queue runs dry with
// threads still waiting is deadlocked: that is reported, never a hang.
#include "servekit/simt/platform.hpp"
#if defined(SERVEKIT_SIMT_HOST)
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <source_location>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "servekit/simt/dim.hpp"
#include "servekit/simt/error.hpp"
#include "servekit/simt/fiber.hpp"
#include "servekit/simt/schedule.hpp"

namespace servekit::simt {
inline namespace SERVEKIT_DEVICE_ABI {
namespace detail {

enum class ThreadState : std::uint8_t { Ready, AtBarrier, AtWarpOp, Exited };

// A warp-level op completes when every lane of its mask has arrived; the last lane to arrive
// runs the op's exchange for all of them. Lanes pass their operands and result by address:
// a waiting lane's frame stays alive on its fiber stack until it is resumed.
struct LaneSlot {
  const void* in = nullptr;
  void* out = nullptr;
};
using WarpExchangeFn = void (*)(unsigned lanes, const LaneSlot* slots);

struct WarpState {
  LaneSlot slots[kWarpSize];
  // Ops in progress, one per mask; divergent code may run several at once. A lane arriving
  // with a pending op's mask must call the same op (name) with the same qualifiers (a
  // shuffle's width and operand size), as PTX requires of the lanes of one .sync op.
  struct Pending {
    WarpExchangeFn fn;
    const char* op;
    unsigned qual;
    unsigned mask;
    unsigned arrived;
  };
  Pending pending[kWarpSize];
  int n_pending = 0;
  unsigned existing = 0;  // lanes that exist (the last warp of a block may be partial)
};

// What a waiting thread waits for, for the deadlock report.
struct WaitSite {
  const char* op = nullptr;  // "__syncthreads", "__shfl_xor_sync", ...
  unsigned mask = 0;         // warp ops
  const char* file = nullptr;
  unsigned line = 0;
};

// A thread's cp.async copies that have not landed (simt/async_copy.hpp), in the order started:
// open[0, group_ends[0]) is the oldest committed group, and so on; past group_ends.back() the
// copies not yet committed.
struct AsyncCopy {
  unsigned char* dst;
  const unsigned char* src;
  int src_bytes;  // of 16; the rest are zeros
};
struct AsyncCopies {
  std::vector<AsyncCopy> open;
  std::vector<std::size_t> group_ends;
  // Lands every committed group but the newest `keep`.
  static void land(const AsyncCopy& c) {
    std::memcpy(c.dst, c.src, static_cast<std::size_t>(c.src_bytes));
    std::memset(c.dst + c.src_bytes, 0, static_cast<std::size_t>(16 - c.src_bytes));
  }
  void land(int keep) {
    const std::size_t groups = group_ends.size();
    if (groups <= static_cast<std::size_t>(keep)) return;
    const std::size_t done = groups - static_cast<std::size_t>(keep), end = group_ends[done - 1];
    for (std::size_t i = 0; i < end; ++i) land(open[i]);
    open.erase(open.begin(), open.begin() + static_cast<std::ptrdiff_t>(end));
    group_ends.erase(group_ends.begin(), group_ends.begin() + static_cast<std::ptrdiff_t>(done));
    for (std::size_t& e : group_ends) e -= end;
  }
  void clear() { open.clear(), group_ends.clear(); }
};

// The next number of a splitmix64 stream: the emulator's seeded choices (thread order, when a
// cp.async lands).
inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Ready thread ids in arrival order, taken in the schedule's order. Each thread is in it at
// most once.
class ReadyQueue {
 public:
  void reset(int capacity) {
    buf_.assign(static_cast<std::size_t>(capacity), 0);
    head_ = size_ = 0;
  }
  // rng: the Random order's state (splitmix64), seeded per block.
  void set_order(Order order, std::uint64_t rng) { order_ = order, rng_ = rng; }
  SERVEKIT_SIMT_INLINE void push(int t) {
    std::size_t i = head_ + size_;
    if (i >= buf_.size()) i -= buf_.size();
    buf_[i] = t;
    ++size_;
  }
  SERVEKIT_SIMT_INLINE int pop() {  // -1 when empty
    if (size_ == 0) return -1;
    if (order_ != Order::Fifo) {
      // Reverse: the newest; Random: a uniform pick, moved to the head and taken from there.
      const std::size_t k = order_ == Order::Reverse ? size_ - 1 : next_random() % size_;
      std::size_t i = head_ + k;
      if (i >= buf_.size()) i -= buf_.size();
      if (order_ == Order::Reverse) {
        --size_;
        return buf_[i];
      }
      std::swap(buf_[head_], buf_[i]);
    }
    const int t = buf_[head_];
    if (++head_ == buf_.size()) head_ = 0;
    --size_;
    return t;
  }

 private:
  std::uint64_t next_random() { return splitmix64(rng_); }

  std::vector<int> buf_;
  std::size_t head_ = 0, size_ = 0;
  Order order_ = Order::Fifo;
  std::uint64_t rng_ = 0;
};

enum class Outcome { Running, Done, Deadlock, Threw };

// Everything an OS thread needs to run blocks; one per OS thread, kept across launches so the
// fibers and their stacks are made once.
struct Worker {
  // The fibers, fibers[i] runs the block's thread i.
  std::vector<std::unique_ptr<Fiber>> fibers;
  fcontext_t main_ctx = nullptr;
  StackSpan main_stack;

  // The kernel body with its arguments bound.
  void (*body)(const void*) = nullptr;
  const void* closure = nullptr;

  // The block being run.
  int n_threads = 0;
  dim3 block_dim{1, 1, 1};
  std::vector<uint3> thread_idx;   // (n_threads) threadIdx by linear id
  std::vector<ThreadState> state;  // (n_threads)
  std::vector<WaitSite> wait;      // (n_threads)
  std::vector<WarpState> warps;    // (ceil(n_threads / 32))
  ReadyQueue ready;
  int current = 0;  // linear id of the running thread
  int exited = 0;
  int barrier_arrived = 0;
  int barrier_count = 0;   // __syncthreads_count/and/or: predicates summed over arrivals
  int barrier_result = 0;  // ... and the total, read by every thread after the barrier
  bool barrier_sites_differ = false;
  Outcome outcome = Outcome::Done;
  std::exception_ptr error;
  std::string report;  // deadlock description

  std::vector<AsyncCopies> async;  // (n_threads) copies in flight; dropped when a block ends
  bool async_used = false;         // since the last block started
  // Random order: a copy lands when it is started or at its wait, a coin flip from this
  // (splitmix64, seeded per block), since a GPU may land it at any moment in between.
  std::uint64_t copy_rng = 0;
  bool copy_lands_now() { return splitmix64(copy_rng) >> 63; }

  std::vector<unsigned char> smem_storage;  // dynamic shared memory (+ alignment slack)
  unsigned char* dynamic_smem = nullptr;
  bool in_block = false;
  Schedule schedule;  // of the running launch
  // Counts the blocks this OS thread has started: static shared memory (SERVEKIT_SHARED) is
  // poisoned by the first thread of a block that reaches it, when its epoch is older.
  std::uint64_t block_epoch = 0;
  // The launch's shared memory: its kernel, dynamic bytes, and the static + dynamic total it
  // may use (48 KiB, or the opt-in ceiling after simt::set_max_dynamic_smem); the static bytes
  // the running block has reached so far, which a GPU knows at compile time.
  std::string_view kernel;
  std::size_t dynamic_smem_bytes = 0, smem_total_limit = 0, static_smem_bytes = 0;
};

// Static shared memory a kernel may declare: 48 KiB on every GPU since sm_20; more needs
// dynamic shared memory and the opt-in attribute (ptxas refuses a larger static array).
inline constexpr std::size_t kMaxStaticSmemBytes = 48 * 1024;

// The worker of the running OS thread, set while it runs a block (constant-initialised, so
// reading it costs no guard check on the switch paths).
inline thread_local Worker* g_worker = nullptr;

inline Worker& this_worker() {
  static thread_local Worker w;
  return w;
}

void fiber_main(transfer_t t);

// Leave thread `me` (already marked waiting or exited) for the next ready thread, or for the
// worker's main context when none is ready: the block is done, or it is deadlocked.
SERVEKIT_SIMT_INLINE void switch_away(Worker& w, int me) {
  const int next = w.ready.pop();
  if (next < 0) {
    if (w.outcome == Outcome::Running)
      w.outcome = w.exited == w.n_threads ? Outcome::Done : Outcome::Deadlock;
    switch_context(&w.fibers[static_cast<std::size_t>(me)]->ctx, w.main_ctx, w.main_stack);
    return;
  }
  w.current = next;
  threadIdx = w.thread_idx[static_cast<std::size_t>(next)];
  Fiber& to = *w.fibers[static_cast<std::size_t>(next)];
  switch_context(&w.fibers[static_cast<std::size_t>(me)]->ctx, to.ctx, to.stack());
}

// Every fiber runs this loop: one kernel body per block, forever. An exception is caught here
// and the switch to the main context happens after the catch block has ended: exception state
// belongs to the OS thread, not the fiber.
inline void fiber_main(transfer_t t) {
  on_fiber_entry(t);
  Worker& w = *g_worker;
  const int me = w.current;
  for (;;) {
    bool threw = false;
    try {
      w.body(w.closure);
    } catch (...) {
      w.error = std::current_exception();
      threw = true;
    }
    if (threw) {
      w.outcome = Outcome::Threw;
      switch_context(&w.fibers[static_cast<std::size_t>(me)]->ctx, w.main_ctx, w.main_stack);
      continue;  // not reached: the fiber is reset before it is used again
    }
    w.state[static_cast<std::size_t>(me)] = ThreadState::Exited;
    ++w.exited;
    switch_away(w, me);
  }
}

// "0-9, 12, 40-47"
inline std::string format_ranges(const std::vector<int>& ids) {
  std::ostringstream os;
  for (std::size_t i = 0; i < ids.size();) {
    std::size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (i) os << ", ";
    os << ids[i];
    if (j > i) os << '-' << ids[j];
    i = j + 1;
  }
  return os.str();
}

inline bool same_site(const WaitSite& a, const WaitSite& b) {
  return a.op == b.op && a.mask == b.mask && a.line == b.line &&
         (a.file == b.file || (a.file && b.file && std::strcmp(a.file, b.file) == 0));
}

// Threads grouped by what they wait at, then the exited ones, by linear thread index.
inline std::string describe_waits(const Worker& w) {
  std::vector<WaitSite> sites;
  std::vector<std::vector<int>> members;
  std::vector<int> exited;
  for (int i = 0; i < w.n_threads; ++i) {
    const auto s = w.state[static_cast<std::size_t>(i)];
    if (s == ThreadState::Exited) {
      exited.push_back(i);
      continue;
    }
    if (s == ThreadState::Ready) continue;
    const WaitSite& site = w.wait[static_cast<std::size_t>(i)];
    std::size_t k = 0;
    while (k < sites.size() && !same_site(sites[k], site)) ++k;
    if (k == sites.size()) {
      sites.push_back(site);
      members.emplace_back();
    }
    members[k].push_back(i);
  }
  std::ostringstream os;
  for (std::size_t k = 0; k < sites.size(); ++k) {
    if (k) os << "; ";
    os << "threads " << format_ranges(members[k]) << " wait at " << sites[k].op;
    if (sites[k].mask) os << " (mask 0x" << std::hex << sites[k].mask << std::dec << ')';
    if (sites[k].file) os << " (" << sites[k].file << ':' << sites[k].line << ')';
  }
  if (!exited.empty()) os << "; threads " << format_ranges(exited) << " exited";
  return os.str();
}

// Size the worker for blocks of `block` threads; fibers are only ever added.
inline void prepare(Worker& w, dim3 block, std::size_t dynamic_smem_bytes,
                    std::size_t smem_total_limit) {
  w.dynamic_smem_bytes = dynamic_smem_bytes;
  w.smem_total_limit = smem_total_limit;
  const int n = static_cast<int>(volume(block));
  if (w.n_threads != n || w.block_dim.x != block.x || w.block_dim.y != block.y) {
    w.n_threads = n;
    w.block_dim = block;
    w.thread_idx.resize(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i)
      w.thread_idx[static_cast<std::size_t>(i)] = unlinear_index(i, block);
    w.state.assign(static_cast<std::size_t>(n), ThreadState::Ready);
    w.wait.assign(static_cast<std::size_t>(n), WaitSite{});
    w.warps.assign(static_cast<std::size_t>((n + kWarpSize - 1) / kWarpSize), WarpState{});
    for (std::size_t k = 0; k < w.warps.size(); ++k) {
      const int lanes = std::min(kWarpSize, n - static_cast<int>(k) * kWarpSize);
      w.warps[k].existing = lanes == kWarpSize ? kFullMask : (1u << lanes) - 1u;
    }
    w.ready.reset(n);
  }
  if (w.async.size() < static_cast<std::size_t>(n)) w.async.resize(static_cast<std::size_t>(n));
  while (static_cast<int>(w.fibers.size()) < n)
    w.fibers.push_back(std::make_unique<Fiber>(static_cast<int>(w.fibers.size()), &fiber_main));
  // Dynamic shared memory starts as all-ones bytes (a NaN for floats): reading it before
  // writing it shows up in results instead of passing by luck.
  constexpr std::size_t kAlign = 128;
  if (w.smem_storage.size() < dynamic_smem_bytes + kAlign)
    w.smem_storage.resize(dynamic_smem_bytes + kAlign);
  auto p = reinterpret_cast<std::uintptr_t>(w.smem_storage.data());
  w.dynamic_smem = reinterpret_cast<unsigned char*>((p + kAlign - 1) & ~(kAlign - 1));
  std::memset(w.dynamic_smem, 0xff, dynamic_smem_bytes);
  if (w.main_stack.lo == nullptr) w.main_stack = this_thread_stack();
  w.schedule = schedule();
}

// Run block `block_idx` to completion on this OS thread. Returns normally when every thread
// returned; rethrows a thread's exception; throws DeadlockError naming the waiting threads.
inline void run_block(Worker& w, std::string_view kernel, uint3 block_idx, dim3 grid) {
  w.outcome = Outcome::Running;
  w.exited = 0;
  w.barrier_arrived = 0;
  w.barrier_count = 0;
  w.barrier_sites_differ = false;
  w.error = nullptr;
  ++w.block_epoch;
  w.kernel = kernel;
  w.static_smem_bytes = 0;
  // Random: the same shuffle for a block whichever OS thread runs it.
  const std::uint64_t block_id =
      block_idx.x +
      static_cast<std::uint64_t>(grid.x) * (block_idx.y + std::uint64_t{grid.y} * block_idx.z);
  w.ready.set_order(w.schedule.order, w.schedule.seed * 0x9e3779b97f4a7c15ull + block_id);
  w.copy_rng = (w.schedule.seed + 1) * 0xd1b54a32d192ed03ull + block_id;
  for (int i = 0; i < w.n_threads; ++i) {
    w.state[static_cast<std::size_t>(i)] = ThreadState::Ready;
    w.ready.push(i);
  }
  for (auto& warp : w.warps) warp.n_pending = 0;
  // Copies a previous block started and never waited for die with its shared memory.
  if (w.async_used) {
    for (auto& a : w.async) a.clear();
    w.async_used = false;
  }
  blockIdx = block_idx;
  blockDim = w.block_dim;
  gridDim = grid;

  Worker* const outer = g_worker;
  g_worker = &w;
  w.in_block = true;
  const int first = w.ready.pop();
  w.current = first;
  threadIdx = w.thread_idx[static_cast<std::size_t>(first)];
  Fiber& to = *w.fibers[static_cast<std::size_t>(first)];
  switch_context(&w.main_ctx, to.ctx, to.stack());
  w.in_block = false;
  g_worker = outer;

  if (w.outcome == Outcome::Done) return;
  // Threads were left suspended mid-kernel: restart their fibers from scratch.
  for (int i = 0; i < w.n_threads; ++i) w.fibers[static_cast<std::size_t>(i)]->reset();
  while (w.ready.pop() >= 0) {
  }
  std::ostringstream where;
  where << "kernel " << kernel << ", block (" << block_idx.x << ',' << block_idx.y << ','
        << block_idx.z << ") of " << w.n_threads << " threads";
  if (w.outcome == Outcome::Threw) std::rethrow_exception(w.error);
  if (!w.report.empty()) {
    std::string r = std::move(w.report);
    w.report.clear();
    throw DeadlockError(where.str() + ": " + r);
  }
  throw DeadlockError(where.str() + ": deadlock, no thread can proceed: " + describe_waits(w));
}

}  // namespace detail
}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::simt
#endif
