#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One command on a machine with an NVIDIA GPU: build the CUDA targets (SERVEKIT_CUDA=ON), run
# the `cuda` test label, run test_gpt2_cuda under compute-sanitizer (memcheck, racecheck,
# synccheck, initcheck), run the Cuda decode benchmark (tokens/s per format at batch 1/8/64
# beside the read bandwidth measured in the same run), and write a report.
#   scripts/gpu_check.sh [report dir]     (default: $OUT if set, else build-gpu/)
# Packages the machine lacks and cannot download: run scripts/gpu_deps.sh where there is
# network and bring .gpu-deps/ along; they are unpacked into a private prefix here.
set -uo pipefail
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU here (nvidia-smi -L failed); nothing to check" >&2
  exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD="$ROOT/build-gpu"
SANITIZER=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
REPORT_DIR=${1:-${OUT:-$BUILD}}
mkdir -p "$REPORT_DIR"
REPORT="$REPORT_DIR/gpu_report.md"
LOG="$REPORT_DIR/gpu_check.log"
: >"$LOG"
status=0
note() { echo "$*" >>"$REPORT"; }
step() {  # step NAME CMD...: runs CMD, logs it, records pass/fail in the report
  local name=$1
  shift
  echo "== $name: $*" | tee -a "$LOG"
  local t0=$SECONDS
  if "$@" >>"$LOG" 2>&1; then
    note "- $name: passed ($((SECONDS - t0)) s)"
    echo "   passed"
  else
    note "- $name: **FAILED** ($((SECONDS - t0)) s; see gpu_check.log)"
    echo "   FAILED (see $LOG)"
    status=1
  fi
}

{
  echo "# servekit GPU check, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "- commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
  echo "- nvcc: $(nvcc --version | tail -1)"
  echo
} >"$REPORT"

if [ -d "$ROOT/.gpu-deps" ]; then
  PREFIX=/tmp/servekit-gpu-deps
  mkdir -p "$PREFIX"
  for f in "$ROOT"/.gpu-deps/*.deb; do dpkg -x "$f" "$PREFIX"; done
  # Found through CMake's package search, whose imported targets' headers are system headers
  # (nvcc's --Werror=all-warnings must not judge CLI11's); the ICU libraries at run time.
  export CMAKE_PREFIX_PATH="$PREFIX/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export LD_LIBRARY_PATH="$PREFIX/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  note "- packages unpacked from .gpu-deps/: $(ls "$ROOT"/.gpu-deps | tr '\n' ' ')"
fi

note
note "## Steps"
step configure cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVEKIT_CUDA=ON
step build cmake --build "$BUILD" --target test_gpt2_cuda bench_decode_cuda 01_kv_cache_cuda \
  -- -k 0
step "ctest -L cuda" ctest --test-dir "$BUILD" -L cuda --output-on-failure
# memcheck over the whole suite; the slower tools over the decode steps (eager and replayed
# from graphs) and the HF checks of one composition.
step "compute-sanitizer memcheck" "$SANITIZER" --tool memcheck --error-exitcode 9 \
  "$BUILD/tests/test_gpt2_cuda"
for tool in racecheck synccheck initcheck; do
  step "compute-sanitizer $tool" "$SANITIZER" --tool "$tool" --error-exitcode 9 \
    "$BUILD/tests/test_gpt2_cuda" "[budget],[graphs]"
done
note
note "## Decode on the Cuda backend"
note
echo "== bench_decode_cuda" | tee -a "$LOG"
if "$BUILD/bench/bench_decode_cuda" --csv "$REPORT_DIR/decode_cuda.csv" >"$REPORT_DIR/decode_cuda.txt" \
  2>>"$LOG"; then
  { echo '```'; cat "$REPORT_DIR/decode_cuda.txt"; echo '```'; } >>"$REPORT"
else
  note "bench_decode_cuda **FAILED** (see gpu_check.log)"
  status=1
fi
# The decode linears' blocks take several column tiles from batch 2 on (fewer CTAs, x loaded
# once per block): the same batch with one tile a block, for the comparison.
echo "== bench_decode_cuda --tiles-per-block 1" | tee -a "$LOG"
if "$BUILD/bench/bench_decode_cuda" --batches 8 --tiles-per-block 1 \
  --csv "$REPORT_DIR/decode_cuda_one_tile.csv" >"$REPORT_DIR/decode_cuda_one_tile.txt" 2>>"$LOG"; then
  { note; note "Batch 8 with one column tile a block (\`--tiles-per-block 1\`):"; echo '```'
    cat "$REPORT_DIR/decode_cuda_one_tile.txt"; echo '```'; } >>"$REPORT"
else
  note "bench_decode_cuda --tiles-per-block 1 **FAILED** (see gpu_check.log)"
  status=1
fi
cat "$REPORT"
exit $status
