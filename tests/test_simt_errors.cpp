// SPDX-License-Identifier: Apache-2.0
// What a GPU would hang on or refuse, reported by the emulator as exceptions naming the kernel,
// the block and the threads; and exceptions thrown inside a kernel reaching the launch.
#include <catch2/catch.hpp>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "servekit/simt/simt.hpp"

namespace simt = servekit::simt;

namespace {

// Threads 40.. return before the barrier; the rest wait for them forever.
__global__ void early_return(int* out) {
  if (threadIdx.x >= 40) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

// A barrier in a branch some threads skip: threads 0-9 wait at one __syncthreads, the others at
// another. On a GPU the two may pair up by accident.
__global__ void divergent_barrier(int* out) {
  if (threadIdx.x < 10) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

// Lane 3 of each warp leaves before a full-mask shuffle.
__global__ void shuffle_without_lane(int* out) {
  if (threadIdx.x % 32 == 3) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

// Lane 5 calls a shuffle with a mask that leaves itself out.
__global__ void shuffle_bad_mask(int* out) {
  out[threadIdx.x] = __shfl_sync(threadIdx.x == 5 ? 0x1u : 0xffffffffu, 1, 0);
}

__global__ void throws_in_block(int* out) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1;
  __syncthreads();
  if (blockIdx.x == 2 && threadIdx.x == 37) throw std::runtime_error("thread 37 gave up");
  __syncthreads();
}

// Even lanes shuffle up, odd lanes xor, with one mask: two different instructions, which the
// emulator paired as one exchange (the same exchange function) and a GPU leaves undefined.
__global__ void mixed_shuffles(int* out) {
  const int v = static_cast<int>(threadIdx.x);
  out[threadIdx.x] =
      threadIdx.x % 2 ? __shfl_xor_sync(0xffffffffu, v, 1) : __shfl_up_sync(0xffffffffu, v, 1);
}
// Lanes below 16 ballot, the rest ask __any_sync.
__global__ void mixed_votes(unsigned* out) {
  out[threadIdx.x] = threadIdx.x < 16 ? __ballot_sync(0xffffffffu, 1)
                                      : static_cast<unsigned>(__any_sync(0xffffffffu, 1));
}
// The same shuffle with widths 16 and 32 in different lanes.
__global__ void mixed_widths(int* out) {
  out[threadIdx.x] = __shfl_sync(0xffffffffu, 1, 0, threadIdx.x == 7 ? 16 : 32);
}
// ldmatrix with each row address 8 bytes past a 16-byte boundary.
__global__ void ldmatrix_misaligned(int* out, int offset_bytes) {
  SERVEKIT_SHARED(std::uint16_t[8 * 4 * 16], tile);
  for (int i = threadIdx.x; i < 8 * 4 * 16; i += 32) tile[i] = static_cast<std::uint16_t>(i);
  __syncwarp();
  std::uint32_t r[4];
  simt::ldmatrix_x4(r, reinterpret_cast<const char*>(&tile[threadIdx.x * 16]) + offset_bytes);
  out[threadIdx.x] = static_cast<int>(r[0]);
}
// 52 KiB of static shared memory: ptxas refuses more than 48 KiB.
__global__ void big_static_smem(int* out) {
  SERVEKIT_SHARED(float[13 * 1024], big);
  big[threadIdx.x] = 1.f;
  out[threadIdx.x] = static_cast<int>(big[threadIdx.x]);
}
// 40 KiB static: fits alone; with more than 8 KiB of dynamic it needs the opt-in.
__global__ void static_and_dynamic_smem(int* out) {
  SERVEKIT_SHARED(float[10 * 1024], part);
  part[threadIdx.x] = 2.f;
  simt::dynamic_smem<float>()[threadIdx.x] = part[threadIdx.x];
  out[threadIdx.x] = static_cast<int>(simt::dynamic_smem<float>()[threadIdx.x]);
}

__global__ void fill(int* out, int v) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

}  // namespace

TEST_CASE("threads that return before a barrier are a deadlock, not a hang", "[simt]") {
  simt::DeviceBuffer<int> out(64);
  REQUIRE_THROWS_AS(
      simt::launch(simt::kernel<early_return>, dim3(3), dim3(64), 0, nullptr, out.data()),
      simt::DeadlockError);
  REQUIRE_THROWS_WITH(
      simt::launch(simt::kernel<early_return>, dim3(1), dim3(64), 0, nullptr, out.data()),
      Catch::Contains("early_return") && Catch::Contains("block (0,0,0)") &&
          Catch::Contains("threads 0-39 wait at __syncthreads") &&
          Catch::Contains("test_simt_errors.cpp") && Catch::Contains("threads 40-63 exited"));
}

TEST_CASE("threads waiting at different barriers are reported", "[simt]") {
  simt::DeviceBuffer<int> out(48);
  REQUIRE_THROWS_AS(
      simt::launch(simt::kernel<divergent_barrier>, dim3(2), dim3(48), 0, nullptr, out.data()),
      simt::DeadlockError);
  REQUIRE_THROWS_WITH(
      simt::launch(simt::kernel<divergent_barrier>, dim3(1), dim3(48), 0, nullptr, out.data()),
      Catch::Contains("divergent_barrier") && Catch::Contains("different barriers") &&
          Catch::Contains("threads 0-9 wait at __syncthreads") &&
          Catch::Contains("threads 10-47 wait at __syncthreads"));
}

TEST_CASE("a warp op waiting for a lane that exited is reported", "[simt]") {
  simt::DeviceBuffer<int> out(64);
  REQUIRE_THROWS_WITH(
      simt::launch(simt::kernel<shuffle_without_lane>, dim3(1), dim3(64), 0, nullptr, out.data()),
      Catch::Contains("shuffle_without_lane") && Catch::Contains("__shfl_xor_sync") &&
          Catch::Contains("mask 0xffffffff") && Catch::Contains("threads 3, 35 exited"));
  REQUIRE_THROWS_WITH(
      simt::launch(simt::kernel<shuffle_bad_mask>, dim3(1), dim3(32), 0, nullptr, out.data()),
      Catch::Contains("lane 5") && Catch::Contains("mask 0x1"));
}

TEST_CASE("an exception inside a kernel is rethrown by launch; the emulator stays usable",
          "[simt]") {
  for (int workers : {1, 2}) {
    simt::set_host_workers(workers);
    simt::DeviceBuffer<int> out(6 * 64);
    REQUIRE_THROWS_WITH(
        simt::launch(simt::kernel<throws_in_block>, dim3(6), dim3(64), 0, nullptr, out.data()),
        Catch::Contains("thread 37 gave up"));
    REQUIRE_THROWS_AS(
        simt::launch(simt::kernel<early_return>, dim3(4), dim3(64), 0, nullptr, out.data()),
        simt::DeadlockError);
    // Fibers left mid-kernel were reset: the next launch runs from a clean state.
    simt::launch(simt::kernel<fill>, dim3(6), dim3(64), 0, nullptr, out.data(), workers + 40);
    std::vector<int> h(6 * 64);
    out.download(h);
    for (int v : h) REQUIRE(v == workers + 40);
  }
  simt::set_host_workers(0);
}

TEST_CASE("launch configurations CUDA refuses are LaunchErrors naming kernel and value", "[simt]") {
  simt::DeviceBuffer<int> out(2048);
  int* p = out.data();
  auto k = simt::kernel<fill>;
  REQUIRE_THROWS_AS(simt::launch(k, dim3(1), dim3(1025), 0, nullptr, p, 1), simt::LaunchError);
  REQUIRE_THROWS_WITH(simt::launch(k, dim3(1), dim3(1025), 0, nullptr, p, 1),
                      Catch::Contains("fill") && Catch::Contains("1025 threads"));
  REQUIRE_THROWS_WITH(simt::launch(k, dim3(1), dim3(32, 32, 2), 0, nullptr, p, 1),
                      Catch::Contains("2048 threads"));
  REQUIRE_THROWS_WITH(simt::launch(k, dim3(1), dim3(1, 1, 65), 0, nullptr, p, 1),
                      Catch::Contains("(1,1,65)"));
  REQUIRE_THROWS_WITH(simt::launch(k, dim3(1), dim3(0, 4), 0, nullptr, p, 1),
                      Catch::Contains("block (0,4,1) has a zero dimension"));
  REQUIRE_THROWS_WITH(simt::launch(k, dim3(2, 0), dim3(32), 0, nullptr, p, 1),
                      Catch::Contains("grid (2,0,1) has a zero dimension"));
  REQUIRE_THROWS_WITH(simt::launch(k, dim3(1, 65536), dim3(32), 0, nullptr, p, 1),
                      Catch::Contains("grid (1,65536,1)"));
  REQUIRE_THROWS_WITH(
      simt::launch(k, dim3(1), dim3(32), 48 * 1024 + 1, nullptr, p, 1),
      Catch::Contains("fill") && Catch::Contains("49153 bytes") && Catch::Contains("49152"));
  // The opt-in raises the limit up to 227 KiB, and no further.
  auto big = simt::named(&fill, "fill_big_smem");
  simt::set_max_dynamic_smem(big, 100 * 1024);
  simt::launch(big, dim3(1), dim3(32), 100 * 1024, nullptr, p, 5);
  REQUIRE_THROWS_WITH(simt::launch(big, dim3(1), dim3(32), 100 * 1024 + 4, nullptr, p, 1),
                      Catch::Contains("102404 bytes") && Catch::Contains("102400"));
  REQUIRE_THROWS_WITH(simt::set_max_dynamic_smem(big, 227 * 1024 + 1),
                      Catch::Contains("fill_big_smem") && Catch::Contains("232449"));
  // A plain function pointer still gets a name in the message: its signature.
  REQUIRE_THROWS_WITH(simt::launch(&fill, dim3(1), dim3(2000), 0, nullptr, p, 1),
                      Catch::Contains("void (*)(int*, int)"));
}

TEST_CASE("lanes of one warp op calling different ops or qualifiers are refused, naming both",
          "[simt][errors]") {
  simt::DeviceBuffer<int> out(64);
  simt::DeviceBuffer<unsigned> uout(64);
  REQUIRE_THROWS_WITH(
      simt::launch(simt::kernel<mixed_shuffles>, dim3(1), dim3(32), 0, nullptr, out.data()),
      Catch::Contains("__shfl_xor_sync") && Catch::Contains("__shfl_up_sync") &&
          Catch::Contains("with that mask"));
  REQUIRE_THROWS_WITH(
      simt::launch(simt::kernel<mixed_votes>, dim3(1), dim3(32), 0, nullptr, uout.data()),
      Catch::Contains("__any_sync") && Catch::Contains("__ballot_sync"));
  REQUIRE_THROWS_WITH(
      simt::launch(simt::kernel<mixed_widths>, dim3(1), dim3(32), 0, nullptr, out.data()),
      Catch::Contains("width 16") && Catch::Contains("width 32"));
  // The emulator stays usable, and one op of one kind still pairs.
  simt::launch(simt::kernel<shuffle_bad_mask>, dim3(1), dim3(4), 0, nullptr, out.data());
}

TEST_CASE("ldmatrix row addresses that are not 16-byte aligned are refused", "[simt][errors]") {
  simt::DeviceBuffer<int> out(32);
  REQUIRE_THROWS_WITH(
      simt::launch(simt::kernel<ldmatrix_misaligned>, dim3(1), dim3(32), 0, nullptr, out.data(), 8),
      Catch::Contains("ldmatrix_x4") && Catch::Contains("gives row address") &&
          Catch::Contains("not 16-byte aligned"));
  simt::launch(simt::kernel<ldmatrix_misaligned>, dim3(1), dim3(32), 0, nullptr, out.data(), 0);
}

TEST_CASE("static shared memory past 48 KiB, or past the limit with dynamic, is a LaunchError",
          "[simt][errors]") {
  simt::DeviceBuffer<int> out(32);
  REQUIRE_THROWS_AS(
      simt::launch(simt::kernel<big_static_smem>, dim3(2), dim3(32), 0, nullptr, out.data()),
      simt::LaunchError);
  REQUIRE_THROWS_WITH(
      simt::launch(simt::kernel<big_static_smem>, dim3(2), dim3(32), 0, nullptr, out.data()),
      Catch::Contains("big_static_smem") && Catch::Contains("53248 bytes of static"));
  auto k = simt::named(&static_and_dynamic_smem, "static_and_dynamic_smem");
  simt::launch(k, dim3(2), dim3(32), 8 * 1024, nullptr, out.data());  // exactly 48 KiB
  REQUIRE_THROWS_WITH(simt::launch(k, dim3(2), dim3(32), 8 * 1024 + 16, nullptr, out.data()),
                      Catch::Contains("static_and_dynamic_smem") &&
                          Catch::Contains("40960 bytes of static shared memory + 8208 dynamic") &&
                          Catch::Contains("49152"));
  simt::set_max_dynamic_smem(k, 64 * 1024);  // the opt-in lifts the total to 227 KiB
  simt::launch(k, dim3(2), dim3(32), 64 * 1024, nullptr, out.data());
  std::vector<int> host(32);
  out.download(host);
  CHECK(host[5] == 2);
}

#if defined(__SANITIZE_ADDRESS__)
// A fiber is destroyed suspended, so its frames' redzones are still poisoned in ASan's shadow;
// its stack must be unpoisoned before it is unmapped, or whatever is mapped there next (another
// thread's stack and thread_locals: __shared__ arrays) reads as poisoned, and ASan reports a
// stack-buffer-overflow in correct code (seen with the engine's threads under emulation).
namespace {
namespace sd = servekit::simt::detail;
sd::fcontext_t g_main, g_fiber;
sd::StackSpan g_main_stack;

[[gnu::noinline]] void frame_with_redzones() {
  volatile char buf[64];
  buf[0] = 1;
  (void)buf[0];
  sd::switch_context(&g_fiber, g_main, g_main_stack);  // suspended inside this frame, for good
}
void fiber_entry(sd::transfer_t t) {
  sd::on_fiber_entry(t);
  frame_with_redzones();
}
}  // namespace

TEST_CASE("a destroyed fiber leaves no poisoned shadow behind", "[simt][asan]") {
  g_main_stack = sd::this_thread_stack();
  sd::StackSpan span;
  {
    sd::Fiber f(0, fiber_entry);
    span = f.stack();
    sd::switch_context(&g_main, f.ctx, span);
    // The suspended frame's redzones are poisoned now: the check below can fail.
    REQUIRE(__asan_region_is_poisoned(const_cast<void*>(span.lo), span.size) != nullptr);
  }
  CHECK(__asan_region_is_poisoned(const_cast<void*>(span.lo), span.size) == nullptr);
}
#endif
