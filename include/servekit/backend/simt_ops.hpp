// SPDX-License-Identifier: Apache-2.0
#pragma once
// The operations of the decoder on the device kernels (kernels/*.hpp), shared by the Emulated
// and Cuda backends: the same launchers, only where the pointers live differs. Every pointer
// is device memory (under the emulator, device memory is host memory). Kernels are enqueued on
// simt::current_stream(), which the decoder sets to its own for a step.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>

#include "servekit/backend/ops.hpp"
#include "servekit/kernels/attention_decode.hpp"
#include "servekit/kernels/attention_prefill.hpp"
#include "servekit/kernels/embedding.hpp"
#include "servekit/kernels/gather_rows.hpp"
#include "servekit/kernels/kv_append.hpp"
#include "servekit/kernels/layernorm.hpp"
#include "servekit/kernels/linear_i8.hpp"
#include "servekit/kernels/linear_mma.hpp"
#include "servekit/kernels/linear_simt.hpp"
#include "servekit/kernels/linear_u8.hpp"
#include "servekit/kernels/lm_head.hpp"
#include "servekit/kernels/lora.hpp"
#include "servekit/kernels/lora_mma.hpp"
#include "servekit/kernels/sampling.hpp"
#include "servekit/kernels/token_mask.hpp"
#include "servekit/lora/policy.hpp"
#include "servekit/weights/bf16.hpp"
#include "servekit/weights/f16.hpp"
#include "servekit/weights/f32.hpp"
#include "servekit/weights/u8_zero_point.hpp"
#include "servekit/weights/w8a8.hpp"

namespace servekit::backend {

// kSyncEachLaunch: wait after every launch, so that the caller may read the output at once.
template <bool kSyncEachLaunch>
struct SimtOps {
  static constexpr bool device_sampling = true;  // the model picks tokens on the device
  using Epilogue = kernels::Epilogue;

  static void embedding(float* out, const int32_t* tokens, const int32_t* pos, const float* wte,
                        const float* wpe, int N, int C) {
    kernels::embedding({out, tokens, pos, wte, wpe, N, C}, stream());
    done();
  }
  static void layernorm(float* out, const float* in, const float* w, const float* b, int N, int C,
                        float eps) {
    kernels::layernorm({out, in, w, b, N, C, eps}, stream());
    done();
  }
  // W: (K, N), a weights::Matrix (emulator) or its weights::DeviceMatrix (device storage),
  // whose format's family picks the kernels (weights/traits.hpp): fp32 on CUDA cores (GEMV or
  // tiled), fp16 / bf16 on tensor cores (linear_mma.hpp), zero-point uint8 on CUDA cores with
  // the dequantisation fused (linear_u8.hpp), W8A8 with dp4a (linear_i8.hpp). add: (M, N)
  // added before the epilogue (a LoRA delta), or nullptr. split: the decoder's split-K scratch
  // (split_k_size below); without one, or too small, a launch of few rows still runs, in fewer
  // blocks, with the same bits. W8A8 keeps its activation codes there and needs it.
  template <Epilogue E, class Mat>
  static void linear(float* out, const float* x, const Mat& W, const float* b, int M,
                     const float* add = nullptr, const kernels::SplitK& split = {}) {
    using F = weights::format_of<Mat>;
    using Family = weights::LinearFamily;
    constexpr Family family = weights::Traits<F>::family;
    if constexpr (family == Family::Dense32) {
      kernels::linear_simt<E>({out, x, W.data.data(), b, M, W.rows, W.cols, add}, stream(), split);
    } else if constexpr (family == Family::Dense16) {
      constexpr bool bf16 = std::is_same_v<typename weights::Traits<F>::Element, bf16_t>;
      kernels::linear_mma<E, bf16>({out, x, reinterpret_cast<const std::uint16_t*>(W.data.data()),
                                    b, M, W.rows, W.cols, add},
                                   stream(), split);
    } else if constexpr (family == Family::ZeroPoint8) {
      kernels::linear_u8<E>({out, x, W.q.data(), W.scale.data(), W.zero.data(), b, M, W.rows,
                             W.cols, W.group_rows, W.state_cols, add},
                            stream(), split);
    } else if constexpr (family == Family::Int8) {
      kernels::linear_i8<E>({out, x, W.q.data(), W.scale.data(), b, M, W.rows, W.cols, W.group_rows,
                             W.state_cols, add},
                            stream(), split);
    } else {
      static_assert(sizeof(Mat) == 0, "servekit: no device linear kernels for this family");
    }
    done();
  }

  // The split-K scratch of launches of up to M rows over a (K, N) matrix Mat, for the kernel
  // family linear() runs it on (W8A8: its rows' activation codes and scales).
  template <class Mat>
  static kernels::SplitSize split_k_size(int M, int K, int N) {
    if constexpr (weights::family_of<Mat> == weights::LinearFamily::Dense16)
      return kernels::mma_split_size(M, K, N);
    else if constexpr (weights::family_of<Mat> == weights::LinearFamily::Int8)
      return {kernels::i8_scratch_floats(M, K, N, weights::format_of<Mat>::Gran::rows(K)), 0};
    else
      return kernels::core_split_size(M, K, N);
  }

  template <class KvView>
  static void kv_append(const KvView& kv, const float* qkv, const int32_t* slot, const int32_t* row,
                        int N, int C) {
    kernels::kv_append(kernels::KvAppendParams{kernels::device_view(kv), qkv, slot, row, N, C},
                       stream());
    done();
  }
  // Floats of scratch attention() needs for up to decode_rows decode rows over caches of up to
  // max_rows rows: the decode kernel's split-rows partial results.
  static std::size_t attention_workspace(int C, int n_head, int max_rows, int decode_rows) {
    return kernels::decode_workspace_floats(decode_rows, C, n_head,
                                            kernels::decode_splits(max_rows));
  }
  // Query row r attends to cache rows first[r]..row[r]; max_rows bounds their count. The rows
  // of sequences with few new tokens (model::kFewRows: a decode's one, a speculative verify's)
  // take the split-rows decode kernel, the others the prefill kernel, whatever the step's
  // size: by_kind holds the n_decode such rows, then the others (null when all rows are of one
  // kind). Both kernels sum in one order, so the choice changes no bit. workspace:
  // attention_workspace(C, n_head, max_rows, n_decode) floats.
  template <class KvView>
  static void attention(float* out, const float* qkv, const KvView& kv, const int32_t* slot,
                        const int32_t* first, const int32_t* row, int N, int C, int n_head,
                        int max_rows, float* workspace, const int32_t* by_kind, int n_decode) {
    const int hd = kernels::check_heads("attention", C, n_head);
    if (n_decode < 0 || n_decode > N || (!by_kind && n_decode != 0 && n_decode != N))
      fail("attention: ", n_decode, " decode rows of ", N, " need the rows listed by kind");
    const kernels::AttentionParams p{out,
                                     qkv,
                                     kernels::device_view(kv),
                                     slot,
                                     first,
                                     row,
                                     N,
                                     C,
                                     n_head,
                                     1.f / std::sqrt(static_cast<float>(hd))};
    if (n_decode == N) {
      kernels::attention_decode(p, max_rows, workspace, stream());
    } else if (n_decode == 0) {
      kernels::attention_prefill(p, stream());
    } else {
      auto d = p, f = p;
      d.rows = by_kind, d.N = n_decode;
      f.rows = by_kind + n_decode, f.N = N - n_decode;
      kernels::attention_decode(d, max_rows, workspace, stream());
      kernels::attention_prefill(f, stream());
    }
    done();
  }
  // p.y (N, Nout) += each row's LoRA delta (kernels/lora.hpp); distinct: the adapter slots of
  // the step's rows (host memory), one masked pass each for the loop policy. Fmt: the adapters'
  // storage, F32 (LoraMats::a, b) or, for the segmented policy, F16 / BF16 (a16, b16: the
  // tensor-core kernels of kernels/lora_mma.hpp).
  template <class Policy, class Fmt = weights::F32>
  static void lora(const kernels::LoraParams& p, std::span<const int32_t> distinct) {
    constexpr bool k16 = std::is_same_v<Fmt, weights::F16> || std::is_same_v<Fmt, weights::BF16>;
    static_assert(std::is_same_v<Fmt, weights::F32> ||
                      (k16 && std::is_same_v<Policy, servekit::lora::Segmented>),
                  "servekit: 16-bit adapters run the segmented policy's tensor-core kernels only");
    if constexpr (k16) {
      kernels::lora_segmented_mma<std::is_same_v<Fmt, weights::BF16>>(p, stream());
    } else if constexpr (std::is_same_v<Policy, servekit::lora::Loop>) {
      for (int32_t a : distinct) {
        if (a < 0) continue;
        kernels::LoraParams q = p;
        q.only = a;
        kernels::lora_gathered(q, stream());
      }
    } else if constexpr (std::is_same_v<Policy, servekit::lora::Gathered>) {
      kernels::lora_gathered(p, stream());
    } else if constexpr (std::is_same_v<Policy, servekit::lora::Segmented>) {
      kernels::lora_segmented(p, stream());
    } else {
      static_assert(sizeof(Policy) == 0, "servekit: no device LoRA kernel for this policy");
    }
    done();
  }
  // p.y (N, Nout) = each row's LoRA delta, 0 for a row without one (a step's delta buffer):
  // the gathered and segmented kernels write it (LoraParams::write), no zeroing launch first;
  // the loop's passes add into it zeroed.
  template <class Policy, class Fmt = weights::F32>
  static void lora_into(const kernels::LoraParams& p, std::span<const int32_t> distinct) {
    if constexpr (std::is_same_v<Policy, servekit::lora::Loop>) {
      zero(p.y, static_cast<int64_t>(p.N) * p.Nout);
      lora<Policy, Fmt>(p, distinct);
    } else {
      kernels::LoraParams q = p;
      q.write = true;
      lora<Policy, Fmt>(q, distinct);
    }
  }
  static void zero(float* x, int64_t n) {
    kernels::zero(x, n, stream());
    done();
  }
  // out[i] = in[rows[i]]: (M, C) rows of an (N, C) matrix.
  static void gather_rows(float* out, const float* in, const int32_t* rows, int M, int C) {
    kernels::gather_rows({out, in, rows, M, C}, stream());
    done();
  }
  static void lm_head(float* logits, const float* x, const float* wte, int M, int V, int C) {
    kernels::lm_head({logits, x, wte, M, V, C}, stream());
    done();
  }
  // ids (M) and their logprobs (M, or null) from logits (M, V), row m drawn with rows[m]
  // (kernels/sampling.hpp): one launch for a batch whose requests sample each their own way.
  static void sample(int32_t* ids, float* logprobs, const float* logits,
                     const kernels::RowSampling* rows, int M, int V) {
    kernels::sample({ids, logprobs, logits, rows, M, V}, stream());
    done();
  }
  // Tokens refused by a row's grammar -> -inf: masks (n, ceil(V / 32)) for the rows (n).
  static void mask_logits(float* logits, const uint32_t* words, const int32_t* rows, int n, int M,
                          int V) {
    kernels::mask_logits({logits, words, rows, n, M, V}, stream());
    done();
  }

 private:
  // Every launch goes to the current stream (simt::StreamScope): the decoder's own on device
  // storage.
  static simt::stream_handle stream() { return simt::current_stream(); }
  static void done() {
    if constexpr (kSyncEachLaunch) simt::synchronize();
  }
};

}  // namespace servekit::backend
