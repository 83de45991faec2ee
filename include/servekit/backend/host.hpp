// SPDX-License-Identifier: Apache-2.0
#pragma once
// The host backend: C++ loops on servekit's thread pool. The linears (lm_head among them) and
// attention are the vectorised kernels of kernels/host/ (each tested against its naive oracle in
// kernels/ref/); the rest are kernels/ref/'s loops. It is the reference every other backend is
// tested against.
#include <algorithm>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "servekit/backend/ops.hpp"
#include "servekit/core/storage.hpp"
#include "servekit/kernels/host/attention.hpp"
#include "servekit/kernels/host/kv_append.hpp"
#include "servekit/kernels/host/layernorm.hpp"
#include "servekit/kernels/ref/attention.hpp"
#include "servekit/kernels/ref/embedding.hpp"
#include "servekit/kernels/host/linear.hpp"
#include "servekit/kernels/host/lora.hpp"
#include "servekit/kernels/ref/lora.hpp"
#include "servekit/lora/policy.hpp"
#include "servekit/weights/policy.hpp"  // F32

namespace servekit::backend {

template <>
struct Ops<Host> : HostStorage {
  using Storage = HostStorage;
  using Epilogue = kernels::Epilogue;

  // Weight matrices are held packed in the micro-kernel's strips (kernels/host/packed.hpp),
  // made once here, when the model is built: the layout a host matmul streams fastest.
  template <class Mat>
  using Resident = kernels::host::Packed<Mat>;
  template <class Mat>
  static Resident<Mat> resident(Mat&& m) {
    return Resident<Mat>::pack(std::move(m));
  }
  // The head is a packed (C, V) copy in f32 too, a linear like the others, rather than wte
  // (V, C) read along C by kernels/host/lm_head.hpp: from batch 8 on it runs twice as fast
  // (bench_host_linear --head), for V x C x 4 bytes more (the footprint's lm_head line).
  static constexpr bool kHeadCopy = true;

  static void embedding(float* out, const int32_t* tokens, const int32_t* pos, const float* wte,
                        const float* wpe, int N, int C) {
    kernels::ref::embedding(out, tokens, pos, wte, wpe, N, C);
  }
  static void layernorm(float* out, const float* in, const float* w, const float* b, int N, int C,
                        float eps) {
    kernels::host::layernorm(out, in, w, b, N, C, eps);
  }
  template <Epilogue E, class Mat>
  static void linear(float* out, const float* x, const Mat& W, const float* b, int M,
                     const float* add = nullptr) {  // (M, N) added before the epilogue
    kernels::host::linear<E>(out, x, W, b, M, add);
  }
  // p.y (N, Nout) += each row's LoRA delta of p.x (N, K); p.ad (N): each row's adapter slot.
  // The host kernels group rows themselves: distinct, order and segments are for the device.
  // Fmt: the adapters' storage, always fp32 here (model::adapter_format_t).
  template <class Policy, class Fmt = weights::F32>
  static void lora(const kernels::LoraParams& p, std::span<const int32_t> /*distinct*/) {
    static_assert(std::is_same_v<Fmt, weights::F32>, "servekit: host adapters are fp32");
    const std::span<const kernels::LoraMats> tab(p.tab, p.n_slots);
    if constexpr (std::is_same_v<Policy, servekit::lora::Loop>) {
      kernels::ref::lora_loop(p.y, p.x, p.ad, tab, p.N, p.K, p.Nout);
    } else {
      static_assert(kFusesLora<Policy>, "servekit: no host LoRA kernel for this policy");
      if constexpr (std::is_same_v<Policy, servekit::lora::Gathered>)
        kernels::host::lora_gathered(p);
      else
        kernels::host::lora_segmented(p);
    }
  }
  // p.y (N, Nout) = each row's LoRA delta, 0 for a row without one.
  template <class Policy, class Fmt = weights::F32>
  static void lora_into(const kernels::LoraParams& p, std::span<const int32_t> distinct) {
    zero(p.y, static_cast<int64_t>(p.N) * p.Nout);
    lora<Policy, Fmt>(p, distinct);
  }
  // Gathered and segmented add each row's delta inside the linear's epilogue (no (N, Nout)
  // delta matrix: kernels/host/lora.hpp); the loop keeps its whole-batch passes.
  template <class Policy>
  static constexpr bool kFusesLora = std::is_same_v<Policy, servekit::lora::Gathered> ||
                                     std::is_same_v<Policy, servekit::lora::Segmented>;
  template <Epilogue E, class Policy, class Mat>
  static void linear_lora(float* out, const float* x, const Mat& W, const float* b, int M,
                          const kernels::LoraParams& p) requires kFusesLora<Policy> {
    kernels::host::linear_lora<E>(out, x, W, b, M, p,
                                  std::is_same_v<Policy, servekit::lora::Segmented>);
  }
  static void zero(float* x, int64_t n) { std::fill(x, x + n, 0.f); }
  template <class KvView>
  static void kv_append(const KvView& kv, const float* qkv, const int32_t* slot, const int32_t* pos,
                        int N, int C) {
    kernels::host::kv_append(kv, qkv, slot, pos, N, C);
  }
  // Layout-generic attention (kv::ContiguousView, kv::PagedView): rows first..row per query.
  // One task per (row, head) whatever the row's kind: no scratch, no split by kind.
  static std::size_t attention_workspace(int, int, int, int) { return 0; }
  template <class KvView>
  static void attention(float* out, const float* qkv, const KvView& kv, const int32_t* slot,
                        const int32_t* first, const int32_t* row, int N, int C, int n_head,
                        int max_rows, float* /*workspace*/, const int32_t* /*by_kind*/,
                        int /*n_decode*/) {
    kernels::host::attention(out, qkv, kv, slot, first, row, N, C, n_head, max_rows);
  }
  // out[i] = in[rows[i]]: (M, C) rows of an (N, C) matrix.
  static void gather_rows(float* out, const float* in, const int32_t* rows, int M, int C) {
    for (int i = 0; i < M; i++)
      std::copy_n(in + static_cast<int64_t>(rows[i]) * C, C, out + static_cast<int64_t>(i) * C);
  }
};

}  // namespace servekit::backend
