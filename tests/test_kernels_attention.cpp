// SPDX-License-Identifier: Apache-2.0
// Attention kernels under emulation against the naive reference: the flash-style prefill kernel
// and the split-rows decode kernel (+ combine), for fp32 and fp16 caches in the contiguous and
// the paged layout, head dims 16..128, several sequences of different lengths (1..300) in one
// call, a left-padded one (first row > 0) and a chunk that continues an earlier prefill. The
// host backend's vectorised attention (kernels/host/attention.hpp) runs the same checks, with
// head dims that leave a scalar tail too. Built by nvcc into test_kernels_cuda, the device
// kernels' cases run on a GPU: host data reaches them through on() and the cache's device copy.
#include <algorithm>
#include <bit>
#include <numeric>
#include <utility>

#include "device_mirror.hpp"
#include "servekit/simt/memory.hpp"
#include "servekit/kernels/attention_decode.hpp"
#include "servekit/kernels/attention_prefill.hpp"
#include "servekit/kernels/host/attention.hpp"
#include "servekit/kernels/kv_append.hpp"
#include "servekit/kernels/ref/attention.hpp"
#include "servekit/kv/contiguous_cache.hpp"
#include "servekit/kv/policy.hpp"
#include "test_kernels_support.hpp"

namespace sk = servekit;
namespace kn = servekit::kernels;
using namespace kernels_test;
using device_test::on;

namespace {

// The kernels' parameters over a cache view, spelled out (no class template argument
// deduction, which nvcc's front end takes less readily).
template <class View>
auto attention_params(float* out, const float* qkv, const View& view, const int32_t* slot,
                      const int32_t* first, const int32_t* row, int N, int C, int n_head,
                      float scale) {
  using Kv = decltype(kn::device_view(view));
  return kn::AttentionParams<typename View::elem_type, decltype(Kv::rows)>{
      out, qkv, kn::device_view(view), slot, first, row, N, C, n_head, scale};
}

struct Seq {
  int first;  // rows before it are another request's padding: never attended to
  int len;    // the sequence's rows: first .. first + len - 1
  int n_new;  // the last n_new rows are this call's queries
};

constexpr int kMaxLen = 640;  // rows per slot (contiguous) / per block table row (paged)
constexpr int kBlock = 16;    // paged block size

// A cache layer with random contents in every row, in one layout.
template <class T, bool kPaged>
struct TestCache {
  std::vector<T> k, v;
  std::vector<int32_t> table;
  int C;
  // The same rows in device memory (host memory under the emulator), for the device kernels:
  // attention only reads the cache, so one copy serves every call.
  servekit::simt::DeviceBuffer<T> dk, dv;
  servekit::simt::DeviceBuffer<int32_t> dtable;

  TestCache(int slots, int C_, std::mt19937& rng) : C(C_) {
    const int per_slot = (kMaxLen + kBlock - 1) / kBlock;
    const int rows = kPaged ? slots * per_slot * kBlock + 3 * kBlock : slots * kMaxLen;
    auto kf = random_floats(static_cast<std::size_t>(rows) * C, rng, -2.f, 2.f);
    auto vf = random_floats(kf.size(), rng);
    k.resize(kf.size()), v.resize(vf.size());
    for (std::size_t i = 0; i < kf.size(); i++)
      sk::kernels::ref::store_from_f32(k[i], kf[i]), sk::kernels::ref::store_from_f32(v[i], vf[i]);
    if (kPaged) {  // blocks handed out in a shuffled order, as an allocator's free list would
      table.resize(static_cast<std::size_t>(slots) * per_slot);
      std::vector<int32_t> ids(rows / kBlock);
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      std::copy_n(ids.begin(), table.size(), table.begin());
      dtable = servekit::simt::DeviceBuffer<int32_t>(std::span<const int32_t>(table));
    }
    dk = servekit::simt::DeviceBuffer<T>(std::span<const T>(k));
    dv = servekit::simt::DeviceBuffer<T>(std::span<const T>(v));
  }
  auto view() { return view_of(k.data(), v.data(), table.data()); }
  auto device_view() { return view_of(dk.data(), dv.data(), dtable.data()); }
  auto view_of(T* kp, T* vp, int32_t* tp) const {
    if constexpr (kPaged)
      return sk::kv::PagedView<T>{kp, vp, tp, (kMaxLen + kBlock - 1) / kBlock, kBlock, C};
    else
      return sk::kv::ContiguousView<T>{kp, vp, static_cast<int64_t>(kMaxLen) * C, C};
  }
};

enum class Kernel { Prefill, Decode, Host };

template <class T, bool kPaged>
void check_attention(Kernel which, int C, int n_head, const std::vector<Seq>& seqs,
                     int extra_rows = 0) {
  std::mt19937 rng(21 + C + n_head);
  TestCache<T, kPaged> cache(static_cast<int>(seqs.size()), C, rng);
  std::vector<int32_t> slot, first, row;
  int longest = 0;
  for (std::size_t s = 0; s < seqs.size(); s++) {
    for (int i = seqs[s].len - seqs[s].n_new; i < seqs[s].len; i++) {
      slot.push_back(static_cast<int32_t>(s));
      first.push_back(seqs[s].first);
      row.push_back(seqs[s].first + i);
    }
    longest = std::max(longest, seqs[s].len);
  }
  const int N = static_cast<int>(slot.size());
  auto qkv = random_floats(static_cast<std::size_t>(N) * 3 * C, rng, -2.f, 2.f);
  auto got = poisoned(static_cast<std::size_t>(N) * C), want = got;
  const auto view = cache.view();
  const int hd = C / n_head;
  if (which == Kernel::Host) {
    kn::host::attention(got.data(), qkv.data(), view, slot.data(), first.data(), row.data(), N, C,
                        n_head, kMaxLen);
  } else {
    const auto dqkv = on(std::as_const(qkv));
    const auto dslot = on(std::as_const(slot));
    const auto dfirst = on(std::as_const(first));
    const auto drow = on(std::as_const(row));
    auto dout = on(got);  // brought back when the block ends
    const auto p = attention_params(dout, dqkv, cache.device_view(), dslot, dfirst, drow, N, C,
                                    n_head, 1.f / std::sqrt(static_cast<float>(hd)));
    if (which == Kernel::Prefill) {
      kn::attention_prefill(p);
    } else {
      const int max_rows = longest + extra_rows;
      std::vector<float> ws(kn::decode_workspace_floats(N, C, n_head, kn::decode_splits(max_rows)));
      kn::attention_decode(p, max_rows, on(ws));
    }
  }
  sk::kernels::ref::attention(want.data(), qkv.data(), view, slot.data(), first.data(), row.data(),
                              N, C, n_head, kMaxLen);
  // Outputs are convex combinations of V (|v| <= 1): online vs two-pass softmax and the
  // summation order move them by a few ulp of 1.
  require_close(got, want, 1e-5f, 1e-5f);
}

// Sequence lengths 1..300 in one call; one left-padded, one continuing an earlier chunk.
const std::vector<Seq> kPrefill = {{0, 1, 1}, {0, 17, 17}, {0, 300, 300}, {0, 45, 20}, {5, 30, 30}};
const std::vector<Seq> kDecode = {{0, 1, 1},  {0, 17, 1},  {0, 300, 1}, {0, 45, 1},
                                  {5, 30, 1}, {0, 257, 1}, {3, 256, 1}};

template <class T, bool kPaged>
void check_all(Kernel which) {
  const auto& seqs = which == Kernel::Prefill ? kPrefill : kDecode;
  for (auto [C, H] : {std::pair{64, 4}, {96, 3}, {128, 2}, {128, 1}}) {
    INFO("C = " << C << ", n_head = " << H);
    check_attention<T, kPaged>(which, C, H, seqs);
  }
}

}  // namespace

TEST_CASE("flash prefill attention matches the reference", "[kernels][emulated][attention]") {
  SECTION("contiguous f32") {
    check_all<float, false>(Kernel::Prefill);
  }
  SECTION("contiguous f16") {
    check_all<sk::half_t, false>(Kernel::Prefill);
  }
  SECTION("paged f32") {
    check_all<float, true>(Kernel::Prefill);
  }
  SECTION("paged f16") {
    check_all<sk::half_t, true>(Kernel::Prefill);
  }
}

TEST_CASE("split-rows decode attention matches the reference", "[kernels][emulated][attention]") {
  SECTION("contiguous f32") {
    check_all<float, false>(Kernel::Decode);
  }
  SECTION("contiguous f16") {
    check_all<sk::half_t, false>(Kernel::Decode);
  }
  SECTION("paged f32") {
    check_all<float, true>(Kernel::Decode);
  }
  SECTION("paged f16") {
    check_all<sk::half_t, true>(Kernel::Decode);
  }
  SECTION("one split, and splits past every sequence's end") {
    check_attention<float, false>(Kernel::Decode, 64, 2, {{0, 1, 1}, {2, 200, 1}});
    check_attention<float, true>(Kernel::Decode, 64, 2, kDecode, 700);
  }
  SECTION("the decode kernel also serves several query rows per sequence") {
    check_attention<float, false>(Kernel::Decode, 96, 3, kPrefill);
  }
}

// Bitwise: the row's output as the prefill kernel gives it (whole, or in chunks of 37 rows), as
// the decode kernel gives it (every row its own query, up to 10 splits, so the workspace path
// runs too), and as both give it when each takes a list of the rows. This is what keeps a request's
// tokens independent of the steps it shares.
template <class T, bool kPaged>
void check_same_bits(int C, int n_head) {
  std::mt19937 rng(5 + C);
  const std::vector<Seq> seqs = {
      {0, 600, 600}, {5, 130, 130}, {0, 128, 128}, {0, 1, 1}, {3, 40, 40}};
  TestCache<T, kPaged> cache(static_cast<int>(seqs.size()), C, rng);
  const auto view = cache.view();
  std::vector<int32_t> slot, first, row;
  for (std::size_t s = 0; s < seqs.size(); s++)
    for (int i = 0; i < seqs[s].len; i++) {
      slot.push_back(static_cast<int32_t>(s));
      first.push_back(seqs[s].first);
      row.push_back(seqs[s].first + i);
    }
  const int N = static_cast<int>(slot.size());
  const auto qkv = random_floats(static_cast<std::size_t>(N) * 3 * C, rng, -2.f, 2.f);
  const float scale = 1.f / std::sqrt(static_cast<float>(C / n_head));
  const auto dview = cache.device_view();
  const auto dqkv = on(qkv);
  const auto dslot = on(std::as_const(slot));
  const auto dfirst = on(std::as_const(first));
  const auto drow = on(std::as_const(row));
  // Rows [r0, r0 + n) of the list in one call of either kernel, into out; or, given `rows`,
  // the n rows it lists (r0 = 0).
  auto run = [&](Kernel which, int r0, int n, std::vector<float>& out,
                 const int32_t* rows = nullptr) {
    const std::size_t q0 = static_cast<std::size_t>(r0);
    if (which == Kernel::Host) {
      kn::host::attention(out.data() + q0 * C, qkv.data() + q0 * 3 * C, view, slot.data() + r0,
                          first.data() + r0, row.data() + r0, n, C, n_head, kMaxLen);
      return;
    }
    auto dout =
        on(out);  // the whole output, so that rows the call does not write stay as they were
    const auto drows = on(rows, rows ? n : 0);
    auto p = attention_params(
        static_cast<float*>(dout) + q0 * C, static_cast<const float*>(dqkv) + q0 * 3 * C, dview,
        static_cast<const int32_t*>(dslot) + r0, static_cast<const int32_t*>(dfirst) + r0,
        static_cast<const int32_t*>(drow) + r0, n, C, n_head, scale);
    p.rows = drows;
    if (which == Kernel::Prefill) {
      kn::attention_prefill(p);
    } else {
      std::vector<float> ws(kn::decode_workspace_floats(n, C, n_head, kn::decode_splits(kMaxLen)));
      kn::attention_decode(p, kMaxLen, on(ws));
    }
  };
  auto whole = poisoned(static_cast<std::size_t>(N) * C), chunked = whole, decoded = whole,
       few = whole;
  run(Kernel::Prefill, 0, N, whole);
  run(Kernel::Decode, 0, N, decoded);
  for (int r0 = 0, s = 0; s < static_cast<int>(seqs.size()); r0 += seqs[s++].len)
    for (int c = 0; c < seqs[s].len; c += 37)
      run(Kernel::Prefill, r0 + c, std::min(37, seqs[s].len - c), chunked);
  for (int r0 = 0; r0 < N; r0 += 3) run(Kernel::Decode, r0, std::min(3, N - r0), few);
  // By a row list, as a step of decode and prefill rows is split: every third row to the
  // decode kernel (its workspace indexed by list position), the others to the prefill kernel,
  // each writing its rows alone.
  std::vector<int32_t> by_kind;
  for (int r = 0; r < N; r += 3) by_kind.push_back(r);
  const int n_dec = static_cast<int>(by_kind.size());
  for (int r = 0; r < N; r++)
    if (r % 3) by_kind.push_back(r);
  auto listed = poisoned(whole.size());
  run(Kernel::Decode, 0, n_dec, listed, by_kind.data());
  std::size_t wrong_rows = 0;  // written when not listed, or not written when listed
  for (int r = 0; r < N; r++)
    wrong_rows += std::isnan(listed[static_cast<std::size_t>(r) * C]) != (r % 3 != 0);
  CHECK(wrong_rows == 0);
  run(Kernel::Prefill, 0, N - n_dec, listed, by_kind.data() + n_dec);
  std::size_t differ = 0;
  for (std::size_t i = 0; i < whole.size(); i++)
    differ += std::bit_cast<uint32_t>(whole[i]) != std::bit_cast<uint32_t>(listed[i]) ||
              std::bit_cast<uint32_t>(whole[i]) != std::bit_cast<uint32_t>(chunked[i]) ||
              std::bit_cast<uint32_t>(whole[i]) != std::bit_cast<uint32_t>(decoded[i]) ||
              std::bit_cast<uint32_t>(whole[i]) != std::bit_cast<uint32_t>(few[i]);
  CHECK(differ == 0);
  // And the bits are attention's: the reference agrees to rounding.
  auto want = poisoned(whole.size());
  sk::kernels::ref::attention(want.data(), qkv.data(), view, slot.data(), first.data(), row.data(),
                              N, C, n_head, kMaxLen);
  require_close(whole, want, 1e-5f, 1e-5f);
  // The host backend's attention: the same bits for a row whatever its call holds.
  auto host = poisoned(whole.size()), host_few = host;
  run(Kernel::Host, 0, N, host);
  for (int r0 = 0; r0 < N; r0 += 5) run(Kernel::Host, r0, std::min(5, N - r0), host_few);
  std::size_t host_differ = 0;
  for (std::size_t i = 0; i < host.size(); i++)
    host_differ += std::bit_cast<uint32_t>(host[i]) != std::bit_cast<uint32_t>(host_few[i]);
  CHECK(host_differ == 0);
  require_close(host, want, 1e-5f, 1e-5f);
}

TEST_CASE("a query row gets the same bits from either attention kernel, however it is batched",
          "[kernels][emulated][attention]") {
  SECTION("contiguous f32, head_dim 64") {
    check_same_bits<float, false>(128, 2);
  }
  SECTION("paged f16, head_dim 16") {
    check_same_bits<sk::half_t, true>(64, 4);
  }
}

TEST_CASE("attention launchers name the shape they cannot run",
          "[kernels][emulated][attention][errors]") {
  std::vector<float> k(64), q(3 * 48), out(48);
  int32_t zero = 0;
  const sk::kv::ContiguousView<float> view{k.data(), k.data(), 48, 48};
  auto params = [&](int C, int H) {
    return attention_params(out.data(), q.data(), view, &zero, &zero, &zero, 1, C, H, 1.f);
  };
  REQUIRE_THROWS_WITH(kn::attention_prefill(params(48, 1)),
                      Catch::Contains("kernels::attention_prefill") &&
                          Catch::Contains("head_dim 48") && Catch::Contains("16, 32, 64, 128"));
  REQUIRE_THROWS_WITH(
      kn::attention_decode(params(48, 2), 1, nullptr),
      Catch::Contains("kernels::attention_decode") && Catch::Contains("head_dim 24"));
  REQUIRE_THROWS_WITH(kn::attention_decode(params(48, 5), 1, nullptr),
                      Catch::Contains("C = 48 is not a positive multiple of n_head = 5"));
  REQUIRE_THROWS_WITH(kn::attention_decode(params(32, 1), 600, nullptr),
                      Catch::Contains("max_rows = 600") && Catch::Contains("workspace"));
}

TEST_CASE("the host backend's attention matches the reference, batched any way",
          "[kernels][attention][host]") {
  // Head dims 16..128 and 20 and 7, which leave a scalar tail after the vector lanes.
  for (auto [C, H] : {std::pair{64, 4}, {128, 1}, {60, 3}, {42, 6}}) {
    INFO("C = " << C << ", n_head = " << H);
    check_attention<float, false>(Kernel::Host, C, H, kPrefill);
    check_attention<float, true>(Kernel::Host, C, H, kDecode);
    check_attention<sk::half_t, false>(Kernel::Host, C, H, kDecode);
    check_attention<sk::half_t, true>(Kernel::Host, C, H, kPrefill);
  }
}

// The host's scores take a vector's worth of keys at a time and sum their lanes together; each
// score must still be dot()'s, bit for bit, or a row's output would depend on where its keys
// fall against those blocks (prefill against decode, chunking).
template <int NV, class E>
void check_scores_bits(std::mt19937& rng) {
  namespace h = sk::kernels::host;
  const int hd = NV * h::kLanes, T = 3 * h::kLanes + 5;
  INFO("head dim " << hd << (std::is_same_v<E, float> ? ", f32 keys" : ", f16 keys"));
  const auto q = random_floats(hd, rng, -2.f, 2.f);
  const auto kf = random_floats(static_cast<std::size_t>(T) * hd, rng, -2.f, 2.f);
  std::vector<E> k(kf.size());
  for (std::size_t i = 0; i < k.size(); i++) sk::kernels::ref::store_from_f32(k[i], kf[i]);
  auto key = [&](int t) { return k.data() + static_cast<std::size_t>(t) * hd; };
  const float scale = 0.125f;
  for (int t0 : {0, 1, 3, h::kLanes - 1, h::kLanes}) {
    std::vector<float> got(T, 0.f);
    h::scores<NV>(got.data(), q.data(), key, t0, T, hd, scale);
    std::size_t differ = 0;
    for (int t = t0; t < T; t++)
      differ += std::bit_cast<uint32_t>(got[t]) !=
                std::bit_cast<uint32_t>(h::dot(q.data(), key(t), hd) * scale);
    INFO("first key " << t0);
    CHECK(differ == 0);
  }
}

TEST_CASE("the host attention's scores are dot()'s bits, however the keys are blocked",
          "[kernels][attention][host]") {
  std::mt19937 rng(41);
  check_scores_bits<1, float>(rng);
  check_scores_bits<2, float>(rng);
  check_scores_bits<4, float>(rng);
  check_scores_bits<8, float>(rng);
  check_scores_bits<4, sk::half_t>(rng);
}

// The host attention takes two neighbouring prompt rows as one task where its registers allow
// (every head width on AVX-512 up to 64, on AVX2 up to 64 with q read from L1 and the values'
// sums in slices): each row must still get the bits it gets alone, in either cache type and
// layout. Tagged [host], so every ISA build of the host kernels runs it.
template <class T, bool kPaged>
void check_host_rows_alone(int C, int n_head,
                           const std::vector<Seq>& seqs = {
                               {0, 97, 97}, {3, 64, 64}, {0, 1, 1}, {0, 200, 9}}) {
  std::mt19937 rng(31 + C + n_head);
  TestCache<T, kPaged> cache(static_cast<int>(seqs.size()), C, rng);
  const auto view = cache.view();
  std::vector<int32_t> slot, first, row;
  for (std::size_t s = 0; s < seqs.size(); s++)
    for (int i = seqs[s].len - seqs[s].n_new; i < seqs[s].len; i++) {
      slot.push_back(static_cast<int32_t>(s));
      first.push_back(seqs[s].first);
      row.push_back(seqs[s].first + i);
    }
  const int N = static_cast<int>(slot.size());
  const auto qkv = random_floats(static_cast<std::size_t>(N) * 3 * C, rng, -2.f, 2.f);
  auto all = poisoned(static_cast<std::size_t>(N) * C), alone = all, odd = all;
  kn::host::attention(all.data(), qkv.data(), view, slot.data(), first.data(), row.data(), N, C,
                      n_head, kMaxLen);
  auto rows = [&](std::vector<float>& out, int r, int n) {
    kn::host::attention(out.data() + static_cast<std::size_t>(r) * C,
                        qkv.data() + static_cast<std::size_t>(r) * 3 * C, view, slot.data() + r,
                        first.data() + r, row.data() + r, n, C, n_head, kMaxLen);
  };
  for (int r = 0; r < N; r++) rows(alone, r, 1);
  rows(odd, 0, 1);  // the other pairing: rows 1-2, 3-4, ...
  rows(odd, 1, N - 1);
  std::size_t differ = 0;
  for (std::size_t i = 0; i < all.size(); i++)
    differ += std::bit_cast<uint32_t>(all[i]) != std::bit_cast<uint32_t>(alone[i]) ||
              std::bit_cast<uint32_t>(all[i]) != std::bit_cast<uint32_t>(odd[i]);
  CHECK(differ == 0);
}

TEST_CASE("the host attention gives a row the bits it gets alone, however rows are paired",
          "[kernels][attention][host]") {
  for (auto [C, H] : {std::pair{128, 2}, {64, 4}, {64, 2}, {256, 2}, {60, 3}}) {
    INFO("C = " << C << ", n_head = " << H);
    check_host_rows_alone<float, false>(C, H);
    check_host_rows_alone<sk::half_t, true>(C, H);
  }
}

// Decode rows (each alone in its slot) are tasks of several heads walked key by key
// (host/attention_heads.hpp), as many heads a task as the batch allows: a batch of 40 puts
// every head of a row in one task, a row alone splits its heads. Every row's bits must be the
// same either way (and, by the case above, the same as a prompt row's).
TEST_CASE("the host attention gives a decode row its bits, however its heads are grouped",
          "[kernels][attention][host]") {
  std::vector<Seq> decode;
  for (int i = 0; i < 40; i++) decode.push_back({i % 5, 1 + (i * 37) % 300, 1});
  for (auto [C, H] : {std::pair{256, 4}, {128, 8}, {64, 2}, {384, 6}}) {
    INFO("C = " << C << ", n_head = " << H);
    check_host_rows_alone<float, false>(C, H, decode);
    check_host_rows_alone<sk::half_t, true>(C, H, decode);
  }
}

// An int8 cache (kv::I8): each row's K and V quantized per head with a scale (ref::kv_append);
// the host attention folds the scales in and must agree with the reference over the same codes,
// give a row the same bits whatever its call holds, and stay within the quantization's reach of
// the attention over the f32 rows it came from.
TEST_CASE("an int8 cache: codes within half a step, host attention as the reference's",
          "[kernels][attention][host]") {
  for (auto [C, H] : {std::pair{64, 4}, {128, 2}, {60, 3}, {256, 4}}) {
    INFO("C = " << C << ", n_head = " << H);
    const int slots = 3, max_len = 300;
    std::mt19937 rng(7 + C);
    sk::kv::ContiguousCache<sk::kv::ContiguousI8> i8(1, C, slots, max_len, H);
    sk::kv::ContiguousCache<sk::kv::Contiguous> f32(1, C, slots, max_len);
    const auto q8 = i8.view(0);
    const auto qf = f32.view(0);
    // Every row of every slot written, as the model's steps would.
    std::vector<int32_t> slot, row;
    for (int s = 0; s < slots; s++)
      for (int t = 0; t < max_len; t++) slot.push_back(s), row.push_back(t);
    const int R = static_cast<int>(slot.size());
    const auto rows = random_floats(static_cast<std::size_t>(R) * 3 * C, rng, -3.f, 3.f);
    sk::kernels::ref::kv_append(q8, rows.data(), slot.data(), row.data(), R, C);
    sk::kernels::ref::kv_append(qf, rows.data(), slot.data(), row.data(), R, C);
    std::size_t far = 0;
    for (int r = 0; r < R; r++)
      for (int c = 0; c < C; c++) {
        const int64_t at = q8.offset(slot[r], row[r]) + c;
        for (int kv = 0; kv < 2; kv++) {
          const float s = (kv ? q8.scales.v : q8.scales.k)[q8.scales.at(at)];
          const float x = rows[static_cast<std::size_t>(r) * 3 * C + (1 + kv) * C + c];
          const float back = s * static_cast<float>((kv ? q8.v : q8.k)[at]);
          far += !(std::fabs(back - x) <= 0.5f * s * (1 + 1e-5f));
        }
      }
    CHECK(far == 0);
    // Queries: the last 40 rows of slot 0 (a prompt chunk), one decode row of slots 1 and 2.
    std::vector<int32_t> qs, qfirst, qrow;
    for (int t = max_len - 40; t < max_len; t++)
      qs.push_back(0), qfirst.push_back(0), qrow.push_back(t);
    qs.push_back(1), qfirst.push_back(0), qrow.push_back(150);
    qs.push_back(2), qfirst.push_back(7), qrow.push_back(max_len - 1);
    const int N = static_cast<int>(qs.size());
    const auto qkv = random_floats(static_cast<std::size_t>(N) * 3 * C, rng, -2.f, 2.f);
    auto host = poisoned(static_cast<std::size_t>(N) * C), apart = host, want = host, exact = host;
    kn::host::attention(host.data(), qkv.data(), q8, qs.data(), qfirst.data(), qrow.data(), N, C, H,
                        max_len);
    for (int r = 0; r < N; r++)  // each row alone: the same bits
      kn::host::attention(apart.data() + static_cast<std::size_t>(r) * C,
                          qkv.data() + static_cast<std::size_t>(r) * 3 * C, q8, qs.data() + r,
                          qfirst.data() + r, qrow.data() + r, 1, C, H, max_len);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < host.size(); i++)
      differ += std::bit_cast<uint32_t>(host[i]) != std::bit_cast<uint32_t>(apart[i]);
    CHECK(differ == 0);
    sk::kernels::ref::attention(want.data(), qkv.data(), q8, qs.data(), qfirst.data(), qrow.data(),
                                N, C, H, max_len);
    require_close(host, want, 1e-5f, 1e-5f);
    // Against the f32 rows: V's codes are off by at most half a step (3 / 254 here), and the
    // scores' error moves the weights; outputs (|v| <= 3) stay within a few steps.
    sk::kernels::ref::attention(exact.data(), qkv.data(), qf, qs.data(), qfirst.data(), qrow.data(),
                                N, C, H, max_len);
    float worst = 0.f;
    for (std::size_t i = 0; i < host.size(); i++)
      worst = std::max(worst, std::fabs(host[i] - exact[i]));
    WARN("int8 cache vs f32: max |d out| " << worst << " (a step: " << 3.f / 127 << ")");
    CHECK(worst <= 2 * 3.f / 127);

    // The device kernels (the emulator here, a GPU under nvcc) on the same cache: kv_append
    // writes the same codes and scales, and the prefill and decode kernels (which dequantize a
    // feature as code x scale, the same product in both) agree to the bit and with the reference.
    const std::size_t n_el = static_cast<std::size_t>(slots) * max_len * C;
    const std::size_t n_sc = static_cast<std::size_t>(slots) * max_len * H;
    std::vector<int8_t> dk_host(n_el, 0), dv_host(n_el, 0);
    std::vector<float> dks_host(n_sc, -1.f), dvs_host(n_sc, -1.f);
    {
      auto dk = on(dk_host), dv = on(dv_host);  // brought back when the block ends
      auto dks = on(dks_host), dvs = on(dvs_host);
      const sk::kv::ContiguousView<int8_t> dview{
          dk, dv, static_cast<int64_t>(max_len) * C, C, {dks, dvs, q8.scales.group}};
      kn::kv_append(kn::KvAppendParams<int8_t, sk::kv::ContiguousRows>{
          kn::device_view(dview), on(rows), on(slot), on(row), R, C});
    }
    CHECK(std::equal(dk_host.begin(), dk_host.end(), q8.k));
    CHECK(std::equal(dv_host.begin(), dv_host.end(), q8.v));
    CHECK(std::equal(dks_host.begin(), dks_host.end(), q8.scales.k));
    CHECK(std::equal(dvs_host.begin(), dvs_host.end(), q8.scales.v));
    if (C / H != 16 && C / H != 32 && C / H != 64 && C / H != 128) continue;  // kernels' widths
    auto dk = on(dk_host), dv = on(dv_host);
    auto dks = on(dks_host), dvs = on(dvs_host);
    const sk::kv::ContiguousView<int8_t> dview{
        dk, dv, static_cast<int64_t>(max_len) * C, C, {dks, dvs, q8.scales.group}};
    auto prefill = poisoned(host.size()), decode = prefill;
    {
      auto dout = on(prefill);
      kn::attention_prefill(attention_params(dout, on(qkv), dview, on(qs), on(qfirst), on(qrow), N,
                                             C, H, 1.f / std::sqrt(static_cast<float>(C / H))));
    }
    {
      auto dout = on(decode);
      std::vector<float> ws(kn::decode_workspace_floats(N, C, H, kn::decode_splits(max_len)));
      kn::attention_decode(attention_params(dout, on(qkv), dview, on(qs), on(qfirst), on(qrow), N,
                                            C, H, 1.f / std::sqrt(static_cast<float>(C / H))),
                           max_len, on(ws));
    }
    std::size_t kernels_differ = 0;
    for (std::size_t i = 0; i < prefill.size(); i++)
      kernels_differ += std::bit_cast<uint32_t>(prefill[i]) != std::bit_cast<uint32_t>(decode[i]);
    CHECK(kernels_differ == 0);
    require_close(prefill, want, 1e-5f, 1e-5f);
  }
}
