#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Compile every decoder kernel (all launchers; fp32, fp16, bf16, uint8 zero-point and W8A8 linears;
# f32/f16 caches in the contiguous and paged layouts; argmax and both sampler block sizes; the
# LoRA kernels of the three dispatch policies and the zero fill) with
# nvcc for sm_80 and sm_90, warnings as errors; check that the tensor-core linear's PTX holds
# mma.sync and ldmatrix and the W8A8 linears' dp4a and int8 mma.sync; print ptxas's registers / shared memory / spills per kernel and fail if
# a kernel spills.
#   scripts/check_nvcc_kernels.sh [nvcc] [work dir]
set -euo pipefail
NVCC=$(command -v "${1:-nvcc}")
WORK=${2:-$(mktemp -d)}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$WORK"
SRC="$WORK/kernels.cu"
cat > "$SRC" <<'CU'
#include "servekit/backend/cuda.hpp"
#include "servekit/kernels/sampling.hpp"
// Instantiate every launcher through Ops<Cuda>, as a .cu that runs the decoder would.
namespace sk = servekit;
using Ops = sk::backend::Ops<sk::backend::Cuda>;
using E = Ops::Epilogue;
template <class Mat>
void linears(float* f, const Mat& w) {
  Ops::linear<E::Store>(f, f, w, f, 1);
  Ops::linear<E::Gelu>(f, f, w, f, 1);
  Ops::linear<E::Residual>(f, f, w, f, 1);
}
template <class View>
void attention(const View& kv, float* f, const int32_t* i) {
  Ops::kv_append(kv, f, i, i, 1, 64);
  Ops::attention(f, f, kv, i, i, i, 2, 64, 4, 128, f, i, 1);  // a decode row and a prompt row
}
void instantiate_all(float* f, int32_t* i, sk::half_t* h) {
  Ops::embedding(f, i, i, f, f, 1, 64);
  Ops::layernorm(f, f, f, f, 1, 64, 1e-5f);
  linears(f, sk::weights::Matrix<sk::weights::F32>{});
  linears(f, sk::weights::Matrix<sk::weights::F16>{});
  linears(f, sk::weights::Matrix<sk::weights::BF16>{});
  linears(f, sk::weights::Matrix<sk::weights::U8ZeroPoint<sk::weights::PerTensor>>{});
  linears(f, sk::weights::Matrix<sk::weights::U8ZeroPoint<sk::weights::PerChannel>>{});
  linears(f, sk::weights::Matrix<sk::weights::U8ZeroPoint<sk::weights::Group<32>>>{});
  linears(f, sk::weights::Matrix<sk::weights::W8A8<sk::weights::PerChannel>>{});
  linears(f, sk::weights::Matrix<sk::weights::W8A8<sk::weights::Group<32>>>{});
  attention(sk::kv::ContiguousView<float>{f, f, 64, 64}, f, i);
  attention(sk::kv::ContiguousView<sk::half_t>{h, h, 64, 64}, f, i);
  attention(sk::kv::PagedView<float>{f, f, i, 8, 16, 64}, f, i);
  attention(sk::kv::PagedView<sk::half_t>{h, h, i, 8, 16, 64}, f, i);
  Ops::gather_rows(f, f, i, 1, 64);
  Ops::lm_head(f, f, f, 1, 512, 64);
  sk::kernels::argmax({i, f, 1, 512});
  // Both block sizes of the sampler: one warp (V <= 1024) and 256 threads.
  const auto* rows = reinterpret_cast<const sk::kernels::RowSampling*>(i);
  Ops::sample(i, f, f, rows, 1, 512);
  Ops::sample(i, f, f, rows, 1, 50257);
  Ops::mask_logits(f, reinterpret_cast<const uint32_t*>(i), i, 1, 1, 50257);
  const sk::kernels::LoraParams lp{f, f, i, nullptr, 1, f, 1, 64, 64, 8};
  Ops::lora<sk::lora::Loop>(lp, {i, 1});
  Ops::lora<sk::lora::Gathered>(lp, {});
  Ops::lora<sk::lora::Segmented>(lp, {});
  Ops::lora<sk::lora::Segmented, sk::weights::F16>(lp, {});
  Ops::lora<sk::lora::Segmented, sk::weights::BF16>(lp, {});
  Ops::zero(f, 64);
}
CU
# One nvcc run for both: the front end and the host code once, cicc and ptxas per architecture
# (three compiles per architecture before: 160-180 s of CI's 2 cores, now 70). --keep leaves
# each architecture's PTX in $WORK; -Xptxas -v says each kernel's registers and spills.
"$NVCC" -std=c++20 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
  -Werror all-warnings -I"$ROOT/include" --expt-relaxed-constexpr -Xcompiler -Wno-unknown-pragmas \
  -Xptxas -v --keep --keep-dir "$WORK" -c "$SRC" -o "$WORK/kernels.o" > "$WORK/ptxas.txt" 2>&1 || {
  cat "$WORK/ptxas.txt" >&2
  exit 1
}
for ARCH in sm_80 sm_90; do
  PTX="$WORK/kernels.compute_${ARCH#sm_}.ptx"
  # The fp16 and bf16 linears must run on tensor cores, fed by ldmatrix, W by cp.async.
  for INSN in mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 \
              mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 \
              ldmatrix.sync.aligned.m8n8.x4.shared.b16 ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 \
              cp.async.cg.shared.global cp.async.wait_group dp4a.s32.s32 \
              mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32; do
    if ! grep -q "$INSN" "$PTX"; then
      echo "check_nvcc_kernels: $ARCH PTX lacks $INSN" >&2
      exit 1
    fi
  done
  echo "== $ARCH: PTX has mma.sync (f16, bf16, s8), ldmatrix (x4, x4.trans), cp.async and dp4a"
done
# One line per kernel: registers, static shared memory, spill stores / loads (bytes).
awk '
  /Compiling entry function/ {
    match($0, /'"'"'[^'"'"']+'"'"'/); name = substr($0, RSTART + 1, RLENGTH - 2)
    match($0, /for '"'"'sm_[0-9]+'"'"'/); arch = substr($0, RSTART + 5, RLENGTH - 6)
  }
  /bytes spill stores/ { st = $5; ld = $9 }
  /Used [0-9]+ registers/ {
    regs = $0; sub(/.*Used /, "", regs); sub(/ registers.*/, "", regs)
    smem = 0; if (match($0, /[0-9]+ bytes smem/)) smem = substr($0, RSTART, RLENGTH - 11)
    cmd = "c++filt " name; cmd | getline pretty; close(cmd)
    printf "%s | %3d regs | %6d B smem | spill %s/%s B | %s\n", arch, regs, smem, st, ld, pretty
    if (st + 0 > 0 || ld + 0 > 0) { bad = 1; print "check_nvcc_kernels: " arch " spills: " pretty > "/dev/stderr" }
  }
  END { exit bad }' "$WORK/ptxas.txt"
