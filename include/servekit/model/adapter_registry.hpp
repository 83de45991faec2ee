// SPDX-License-Identifier: Apache-2.0
#pragma once
// AdapterRegistry<Dims, Storage, Fmt>: the unmerged LoRA adapters a model runs, by slot, and
// the tables its kernels read them through. A slot is what model::Batch::adapters names per
// sequence; names are unique and a freed slot is reused. On device storage each adapter's A and
// B matrices are uploaded once, when it is added: as fp32, or for Fmt = F16 / BF16 (a 16-bit
// composition's segmented policy: adapter_format_t) converted to 16 bits, round to nearest
// even, as the base weights are (PEFT saves fp32), B's rows padded to an even rank
// (LoraMats::b16). Which adapters to hold, and when to evict them, is decided above
// (serve/adapter_slots.hpp); this is only the model's side of it. On host storage each B is
// also kept transposed, (rank, out), the layout the host kernels stream.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "servekit/core/dtype.hpp"
#include "servekit/core/error.hpp"
#include "servekit/kernels/lora_args.hpp"
#include "servekit/kernels/lora_bt.hpp"
#include "servekit/lora/adapter.hpp"
#include "servekit/lora/policy.hpp"
#include "servekit/model/batch.hpp"
#include "servekit/model/step_plan.hpp"
#include "servekit/weights/policy.hpp"

namespace servekit::model {

// How a model stores its adapters: in its weights' 16-bit format where the segmented policy's
// tensor-core kernels read them (device storage, fp16 or bf16 weights, n_embd in whole k16
// steps), fp32 everywhere else.
template <class Weights, class Lora, class Storage, int C>
using adapter_format_t =
    std::conditional_t<!Storage::is_host && std::is_same_v<Lora, lora::Segmented> && C % 16 == 0 &&
                           (std::is_same_v<Weights, weights::F16> ||
                            std::is_same_v<Weights, weights::BF16>),
                       Weights, weights::F32>;

template <class Dims, class Storage, class Fmt = weights::F32>
class AdapterRegistry {
 public:
  template <class T>
  using Vec = typename Storage::template Vec<T>;
  static constexpr int L = Dims::n_layer, C = Dims::n_embd;
  static constexpr bool k16 = !std::is_same_v<Fmt, weights::F32>;
  static_assert(!k16 || !Storage::is_host, "servekit: 16-bit adapters are for device storage");
  using Elem = std::conditional_t<k16, std::uint16_t, float>;  // of the matrices add() stores

  // The bytes of an adapter where the kernels read it, what a device tier of adapters
  // (serve/adapter_slots.hpp) counts: fp32 A and B (the host kernels' transposed B is B's
  // bytes give or take a block's padding), or 16-bit A and B, B's rank padded to even.
  static std::size_t bytes_of(const lora::Adapter& a) {
    if constexpr (!k16) {
      return a.bytes();
    } else {
      std::size_t n = 0;
      for (const auto& layer : a.layers)
        for (const auto& q : layer)
          if (q) n += q->a.size() + std::size_t(q->out) * (q->rank + q->rank % 2);
      return n * sizeof(Elem);
    }
  }

  int add(std::shared_ptr<const lora::Adapter> p) {
    const lora::Adapter& a = *p;
    if (static_cast<int>(a.layers.size()) != L)
      fail("adapter '", a.name, "' has ", a.layers.size(), " layers; ", Dims::name, " has ", L);
    if (find(a.name) >= 0) fail("adapter '", a.name, "' is already loaded");
    for (int l = 0; l < L; l++)
      for (int t = 0; t < lora::kTargets; t++)
        if (const auto* q = a.find(l, static_cast<lora::Target>(t))) {
          const auto [in, out] = lora::target_shape(static_cast<lora::Target>(t), C);
          if (q->in != in || q->out != out || q->a.size() != std::size_t(q->rank) * in ||
              q->b.size() != std::size_t(out) * q->rank)
            fail("adapter '", a.name, "' layer ", l, " ", lora::kTargetNames[t], " does not fit ",
                 Dims::name);
        }
    std::size_t i = 0;
    while (i < adapters_.size() && adapters_[i]) i++;
    if (i == adapters_.size()) adapters_.emplace_back(), own_.emplace_back();
    own_[i].clear();
    for (const auto& layer : a.layers)
      for (const auto& q : layer)
        if (!q) {
          continue;
        } else if constexpr (Storage::is_host) {  // B transposed, in the host kernels' blocks
          own_[i].push_back(kernels::pack_bt(q->b.data(), q->out, q->rank));
        } else if constexpr (k16) {  // A (rank, in); B (out, rank) padded to an even rank
          const int R = q->rank, R2 = R + R % 2;
          std::vector<std::uint16_t> a16(q->a.size()), b16(std::size_t(q->out) * R2, 0);
          for (std::size_t k = 0; k < a16.size(); k++) a16[k] = to16(q->a[k]);
          for (int n = 0; n < q->out; n++)
            for (int j = 0; j < R; j++)
              b16[std::size_t(n) * R2 + j] = to16(q->b[std::size_t(n) * R + j]);
          own_[i].push_back(Storage::to_vec(std::move(a16)));
          own_[i].push_back(Storage::to_vec(std::move(b16)));
        } else {  // the device's own copy of every A and B
          own_[i].push_back(Storage::to_vec(std::vector<float>(q->a)));
          own_[i].push_back(Storage::to_vec(std::vector<float>(q->b)));
        }
    adapters_[i] = std::move(p);
    dirty_ = true;
    return static_cast<int>(i);
  }
  void remove(int slot) {
    if (slot < 0 || slot >= static_cast<int>(adapters_.size()) || !adapters_[slot])
      fail("remove_adapter: no adapter in slot ", slot);
    adapters_[slot].reset();
    own_[slot].clear();
    dirty_ = true;
  }
  // The slot of the adapter named `name`, or -1.
  int find(std::string_view name) const {
    for (std::size_t i = 0; i < adapters_.size(); i++)
      if (adapters_[i] && adapters_[i]->name == name) return static_cast<int>(i);
    return -1;
  }
  const lora::Adapter* get(int slot) const {
    return slot >= 0 && slot < static_cast<int>(adapters_.size()) ? adapters_[slot].get() : nullptr;
  }
  // Slots in use or freed: get(s) for s in [0, slots()) finds every adapter.
  int slots() const { return static_cast<int>(adapters_.size()); }

  // The plan's LoRA sections (StepPlan::at.lora_*): each row's slot, the adapted rows grouped
  // by slot (then the others), the groups' bounds and slots; the distinct slots stay on the host.
  // Rebuilds the per-linear tables if adapters came or went.
  void plan(StepPlan& p, const Batch& b) {
    if (dirty_) rebuild_tables();
    const int N = p.N;
    int32_t *ad = p.section(p.at.lora_slot), *order = p.section(p.at.lora_order);
    int32_t *seg_start = p.section(p.at.lora_seg_start), *seg_ad = p.section(p.at.lora_seg_slot);
    std::fill(ad, ad + N, -1);
    if (!b.adapters.empty()) {
      int r = 0;
      for (std::size_t i = 0; i < b.seqs.size(); i++)
        for (int j = 0; j < b.seqs[i].n_new; j++) ad[r++] = b.adapters[i];
    }
    int n = 0;
    for (int r = 0; r < N; r++)
      if (ad[r] >= 0) order[n++] = r;
    std::stable_sort(order, order + n, [&](int32_t x, int32_t y) { return ad[x] < ad[y]; });
    p.lora_distinct.clear();
    p.lora_n_seg = 0;
    for (int i = 0; i < n; i++)
      if (i == 0 || ad[order[i]] != ad[order[i - 1]]) {
        seg_start[p.lora_n_seg] = i;
        seg_ad[p.lora_n_seg++] = ad[order[i]];
        p.lora_distinct.push_back(ad[order[i]]);
      }
    seg_start[p.lora_n_seg] = n;
    for (int r = 0; r < N; r++)  // then the rows of none (LoraParams::write zeroes them)
      if (ad[r] < 0) order[n++] = r;
    p.lora_seg_rows = 0;
    for (int g = 0; g < p.lora_n_seg; g++)
      p.lora_seg_rows = std::max(p.lora_seg_rows, seg_start[g + 1] - seg_start[g]);
  }

  // Does an adapter of the step adapt linear lt (layer * kTargets + target)?
  bool adapts(int lt, std::span<const int32_t> distinct) const {
    const std::size_t base = static_cast<std::size_t>(lt) * adapters_.size();
    for (int32_t a : distinct)
      if (tab_host_[base + a].present()) return true;
    return false;
  }
  // (slots()) linear lt's matrices per slot, where the kernels read them.
  const kernels::LoraMats* table(int lt) const {
    return tab_.data() + static_cast<std::size_t>(lt) * adapters_.size();
  }
  int max_rank() const { return max_rank_; }

 private:
  // (L * 4, slots): each linear's matrices per adapter slot, where the kernels read them.
  void rebuild_tables() {
    const int slots = static_cast<int>(adapters_.size());
    tab_host_.assign(static_cast<std::size_t>(L) * lora::kTargets * slots, {});
    max_rank_ = 0;
    for (int i = 0; i < slots; i++) {
      if (!adapters_[i]) continue;
      const lora::Adapter& a = *adapters_[i];
      std::size_t k = 0;  // position in own_[i]: Bt, or A and B, of each pair in order
      for (int l = 0; l < L; l++)
        for (int t = 0; t < lora::kTargets; t++)
          if (const auto* q = a.find(l, static_cast<lora::Target>(t))) {
            kernels::LoraMats& m = tab_host_[(l * lora::kTargets + t) * slots + i];
            m = {q->a.data(), q->b.data(), q->rank, a.scale};
            if constexpr (Storage::is_host) {
              m.bt = own_[i][k++].data();
            } else if constexpr (k16) {  // the 16-bit copies only
              m.a = m.b = nullptr;
              m.a16 = own_[i][k].data(), m.b16 = own_[i][k + 1].data();
              k += 2;
            } else {
              m.a = own_[i][k].data(), m.b = own_[i][k + 1].data();
              k += 2;
            }
            max_rank_ = std::max(max_rank_, q->rank);
          }
    }
    if constexpr (Storage::is_host)
      tab_ = tab_host_;
    else
      Storage::upload(tab_, std::span<const kernels::LoraMats>(tab_host_));
    dirty_ = false;
  }

  static std::uint16_t to16(float f) {
    if constexpr (std::is_same_v<Fmt, weights::BF16>)
      return float_to_bf16(f).bits;
    else
      return float_to_half(f).bits;
  }

  // By slot; host storage: each B transposed; device storage: each A and B uploaded, in fp32
  // or as their 16-bit copies.
  std::vector<std::shared_ptr<const lora::Adapter>> adapters_;
  std::vector<std::vector<Vec<Elem>>> own_;
  // (L * 4, slots) each linear's matrices per slot (a host copy to decide which linears a
  // step adapts), rebuilt when adapters come and go; the widest rank among them.
  std::vector<kernels::LoraMats> tab_host_;
  Vec<kernels::LoraMats> tab_;
  bool dirty_ = true;
  int max_rank_ = 0;
};

}  // namespace servekit::model
