#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Compile the simt test kernels with nvcc for sm_80 and sm_90 (warnings are errors), check that
# the PTX holds the tensor-core and warp instructions the wrappers are meant to emit, and print
# ptxas's register / spill report.
#   scripts/check_nvcc_simt.sh [nvcc] [work dir]
set -euo pipefail
NVCC=$(command -v "${1:-nvcc}")
WORK=${2:-$(mktemp -d)}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$WORK"
SRC="$WORK/simt_kernels.cu"
cat > "$SRC" <<'CU'
#include "test_simt_block_kernels.hpp"
#include "test_simt_warp_kernels.hpp"
#include "test_simt_mma_kernels.hpp"
#include "test_simt_async_kernels.hpp"
#include "test_simt_schedule_kernels.hpp"
#include "test_simt_graph_kernels.hpp"
// Instantiate the templates and the launch wrapper, as the host side of a .cu would.
void launch_all(float* f, int* i, unsigned* u, std::uint16_t* h, std::uint32_t* r, __half* hh) {
  namespace simt = servekit::simt;
  simt::launch(simt::kernel<simt_test::block_sum>, dim3(4), dim3(256), 0, nullptr, i, i, 1000);
  simt::launch(simt::kernel<simt_test::reverse_smem>, dim3(4), dim3(256), 1024, nullptr, i, i, 1000);
  simt::launch(simt::kernel<simt_test::mma_tile<false>>, dim3(1), dim3(32), 0, nullptr, h, h, f, f);
  simt::launch(simt::kernel<simt_test::mma_tile<true>>, dim3(1), dim3(32), 0, nullptr, h, h, f, f);
  simt::launch(simt::kernel<simt_test::mma_tile_s8>, dim3(1), dim3(32), 0, nullptr,
               reinterpret_cast<const std::int8_t*>(h), reinterpret_cast<const std::int8_t*>(h), i, i);
  simt::launch(simt::kernel<simt_test::ldmatrix_all>, dim3(1), dim3(32), 0, nullptr, h, r);
  simt::launch(simt::kernel<simt_test::async_tiles>, dim3(1), dim3(32), 0, nullptr, f, f, 0);
  simt::launch(simt::kernel<simt_test::async_partial>, dim3(1), dim3(32), 0, nullptr,
               reinterpret_cast<unsigned char*>(h), reinterpret_cast<unsigned char*>(h), 16);
  simt::launch(simt::kernel<simt_test::async_pipeline<true>>, dim3(1), dim3(32), 0, nullptr, f, f, 4);
  simt::launch(simt::kernel<simt_test::async_pipeline<false>>, dim3(1), dim3(32), 0, nullptr, f, f, 4);
  simt::launch(simt::kernel<simt_test::hgemm_mma>, dim3(1), dim3(128), 0, nullptr, hh, hh, f, 16, 8, 16);
  simt::launch(simt::kernel<simt_test::votes>, dim3(1), dim3(32), 0, nullptr, i, u);
  simt::launch(simt::kernel<simt_test::atomics>, dim3(1), dim3(32), 0, nullptr, i, u, f, i, i, f, 1);
  simt::launch(simt::kernel<simt_test::left_neighbour<true>>, dim3(2), dim3(256), 0, nullptr, i);
  simt::launch(simt::kernel<simt_test::block_total<true>>, dim3(2), dim3(64), 0, nullptr, i);
  simt::DeviceBuffer<float> buf(16);
  simt::Stream s;
  simt::Event e0, e1;
  e0.record(s);
  e1.record(s);
  (void)elapsed_ms(e0, e1);
  simt::PinnedBuffer<float> pinned(16);
  simt::Graph g = simt::capture(s, [&] {
    simt::copy_to_device(buf.data(), pinned.data(), 16, s.handle());
    simt::launch(simt::kernel<simt_test::affine>, dim3(1), dim3(16), 0, s.handle(), f, buf.data(),
                 simt_test::Affine{2.f, 1.f}, 16);
  });
  g.launch(s);
  simt::StagingBuffer staging;
  (void)staging.put(std::span<const float>(pinned.data(), 16));
  staging.reserve_device();
  staging.upload(s);
  simt::StreamScope scope(s);
}
CU
# One nvcc run for both: the front end and the host code once, cicc and ptxas per architecture
# (three compiles per architecture before, as check_nvcc_kernels.sh had). --keep leaves each
# architecture's PTX in $WORK; -Xptxas -v says each kernel's registers and spills.
"$NVCC" -std=c++20 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
  -Werror all-warnings -I"$ROOT/include" -I"$ROOT/tests" -Xptxas -v --keep --keep-dir "$WORK" \
  -c "$SRC" -o "$WORK/simt_kernels.o" > "$WORK/ptxas.txt" 2>&1 || {
  cat "$WORK/ptxas.txt" >&2
  exit 1
}
for ARCH in sm_80 sm_90; do
  PTX="$WORK/simt_kernels.compute_${ARCH#sm_}.ptx"
  for INSN in mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 \
              mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 \
              mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 \
              ldmatrix.sync.aligned.m8n8.x4.shared.b16 ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 \
              cp.async.cg.shared.global cp.async.commit_group cp.async.wait_group \
              shfl.sync.bfly bar.sync vote.sync.ballot; do
    if ! grep -q "$INSN" "$PTX"; then
      echo "check_nvcc_simt: $ARCH PTX lacks $INSN" >&2
      exit 1
    fi
  done
  echo "== $ARCH: PTX has mma.sync (f16, bf16, s8), ldmatrix, cp.async, shfl.sync, bar.sync, vote.sync"
  # ptxas's lines for this architecture: from its "Compiling entry ... for 'sm_XX'" on.
  awk -v arch="$ARCH" '/Compiling entry function/ { on = index($0, "for '"'"'" arch "'"'"'") > 0 }
    on && /Compiling entry|registers|spill/' "$WORK/ptxas.txt" | sed 's/^ptxas info    : //'
done
