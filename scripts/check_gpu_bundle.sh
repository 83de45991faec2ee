#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Proves the GPU bundle on a machine without a GPU (ctest `gpu_bundle`, so CI): collects it from
# the build folder's programs (scripts/gpu_bundle.sh --no-build, which also checks their shared
# libraries and the 64 MiB limit), then checks that
#  - every program (the bundle's and the designs folder's) starts and, finding no CUDA device, exits with status 69 and one line;
#  - every device test lists at least one test, and exactly the tests its emulated twin runs
#    from the same source files (less those tagged [emulator]: the emulator's own behaviour;
#    hidden tests, [.], are listed by neither);
#  - the server folder's servekit-gpu finds every shared library it needs beyond glibc in the
#    folder's lib/, lists its cuda composition, and refuses --backend cuda without a device with
#    one line that says so (not a crash)
#   scripts/check_gpu_bundle.sh BUILD_DIR
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(realpath "$1")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
BUNDLE="$WORK/bundle"
SERVER="$WORK/server"
DESIGNS="$WORK/designs"
SERVEKIT_BUILD_DIR="$BUILD" bash "$ROOT/scripts/gpu_bundle.sh" --no-build "$BUNDLE" "$SERVER" \
  "$DESIGNS"
fail=0

# A device machine the bundle lands on has a GPU; this one must not, or the check means nothing.
if nvidia-smi -L >/dev/null 2>&1; then
  echo "check_gpu_bundle: this machine has a GPU; run scripts/gpu_check.sh instead" >&2
  exit 1
fi
for p in "$BUNDLE"/bin/* "$DESIGNS"/bin/*; do
  name=$(basename "$p")
  set +e
  out=$("$p" 2>&1 </dev/null)
  rc=$?
  set -e
  lines=$(printf '%s\n' "$out" | grep -c .)
  if [ $rc -eq 69 ] && [ "$lines" -eq 1 ] && [[ $out == *"no CUDA device"* ]]; then
    echo "ok: $name without a device: exit 69, \"$out\""
  else
    echo "FAIL: $name without a device: exit $rc, $lines lines:" >&2
    printf '%s\n' "$out" | head -20 >&2
    fail=1
  fi
done

# name<TAB>source file (basename), one test a line, from Catch2's verbose name listing (which
# exits with the number of tests listed; a signal is a crash).
listing() {
  local rc=0
  "$@" --list-test-names-only -v high >"$WORK/listing" || rc=$?
  if [ $rc -ge 128 ]; then
    echo "FAIL: $1 crashed listing its tests (exit $rc)" >&2
    fail=1
  fi
  sed -n 's|^\(.*\)\t@.*/\([^/:]*\):[0-9]*$|\1\t\2|p' "$WORK/listing" | sort
}
twin() {  # device test, its emulated twins (the programs that run the same sources)
  local dev=$1
  shift
  listing "$BUNDLE/bin/$dev" >"$WORK/$dev.dev"
  local n
  n=$(grep -c . "$WORK/$dev.dev" || true)
  if [ "$n" -eq 0 ]; then
    echo "FAIL: $dev lists no tests" >&2
    fail=1
    return
  fi
  cut -f2 "$WORK/$dev.dev" | sort -u >"$WORK/$dev.files"
  for emu in "$@"; do listing "$BUILD/tests/$emu" "~[emulator]~[.]"; done | sort |
    awk -F'\t' 'NR == FNR { f[$1]; next } $2 in f' "$WORK/$dev.files" - >"$WORK/$dev.emu"
  if diff -u "$WORK/$dev.emu" "$WORK/$dev.dev" >"$WORK/$dev.diff"; then
    echo "ok: $dev lists the $n tests $* run from $(paste -sd' ' "$WORK/$dev.files")"
  else
    echo "FAIL: $dev and $* list different tests from the same sources (- emulated, + device):" >&2
    cat "$WORK/$dev.diff" >&2
    fail=1
  fi
}
twin test_gpt2_cuda test_gpt2_device_storage
twin test_invariants_cuda test_invariants_device_storage
twin test_kernels_cuda test_kernels test_kernels_sampling test_kernels_u8
twin test_engine_cuda test_engine_emulated test_constrain_emulated
twin test_simt_cuda test_simt

# servekit-gpu with the carried libraries: each one it needs beyond glibc resolves to lib/.
gpu="$SERVER/bin/servekit-gpu"
export LD_LIBRARY_PATH="$SERVER/lib"
outside=$(ldd "$gpu" | awk '$2 == "=>" {print $1, $3}' |
  grep -Ev '^(libc|libm|libdl|libpthread|librt)\.so' | grep -v " $SERVER/lib/" || true)
if [ -n "$outside" ]; then
  echo "FAIL: servekit-gpu needs libraries the server folder does not carry: $outside" >&2
  fail=1
else
  echo "ok: servekit-gpu's shared libraries beyond glibc are in the server folder ($(ls "$SERVER/lib" | paste -sd' '))"
fi
if "$gpu" --version 2>&1 | grep -q "f16/paged16-f16/lora-segmented/continuous/cuda"; then
  echo "ok: servekit-gpu --version lists its cuda composition"
else
  echo "FAIL: servekit-gpu --version does not list f16/paged16-f16/lora-segmented/continuous/cuda" >&2
  fail=1
fi
set +e
out=$("$gpu" generate --backend cuda --weights f16 --kv paged-f16 --lora segmented -n 2 hi 2>&1 </dev/null)
rc=$?
set -e
if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [[ $out == *"no usable CUDA device"* ]]; then
  echo "ok: servekit-gpu --backend cuda without a device: exit $rc, \"$(printf '%s\n' "$out" | tail -1)\""
else
  echo "FAIL: servekit-gpu --backend cuda without a device: exit $rc:" >&2
  printf '%s\n' "$out" | head -20 >&2
  fail=1
fi
exit $fail
