#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds, on a machine without a GPU (this one, CI), the CUDA programs the GPU check runs, and
# collects them into .gpu-bundle/, .gpu-server/ and .gpu-designs/ (git-ignored) to carry to a
# machine that has a GPU:
#   bash scripts/gpu_bundle.sh                  # build (scripts/build.sh -DSERVEKIT_CUDA=ON), collect
#   bash scripts/gpu_bundle.sh --no-build [DIR [SERVER_DIR [DESIGNS_DIR]]]   # collect the build's
#   bash scripts/gpu_bundle.sh --no-server      # the bundle and designs only: neither CLI is built
#                                               # (the server check, its own call, is skipped)
# then, on the GPU machine (the device tool's run, 10 minutes a call):
#   run(command="bash scripts/gpu_check.sh all", carry=[".gpu-bundle", ".gpu-designs"])
#   run(command="bash scripts/gpu_check.sh designs", carry=[".gpu-bundle", ".gpu-designs"])
#   run(command="bash scripts/gpu_check.sh server", carry=[".gpu-server"])
# (gpu_check.sh also takes steps joined by commas: tests,bench,designs.)
# Each test and bench program is sm_80 + sm_90 code with sm_90 PTX, and links the CUDA runtime,
# libstdc++, libgcc and libgomp statically: there it needs glibc and the driver's libcuda only,
# which this script checks. The server folder holds servekit-gpu (the CLI's cuda composition,
# host code for any x86-64), the shared libraries it links beyond glibc (lib/: libstdc++ and
# libgcc_s), and the host backend's greedy answers to the server check's requests
# (expected.json). The designs folder holds the design comparisons' benchmarks on the device
# (bench_lora_cuda, bench_speculative_cuda), in a folder of their own. Each travels beside the
# checkout's tracked files: the script prints their sizes, which must stay under the 64 MiB a
# call carries; the fatbins are zstd-compressed (CMakeLists.txt), so the bundle and the designs
# folder fit in one call together (carry=[".gpu-bundle", ".gpu-designs"]), which it also checks.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD="${SERVEKIT_BUILD_DIR:-$ROOT/build}"
build=1
server=1
while [ $# -gt 0 ]; do
  case "$1" in
  --no-build) build=0 ;;
  --no-server) server=0 ;;
  *) break ;;
  esac
  shift
done
BUNDLE=$(realpath -m "${1:-$ROOT/.gpu-bundle}")
SERVER=$(realpath -m "${2:-$ROOT/.gpu-server}")
DESIGNS=$(realpath -m "${3:-$ROOT/.gpu-designs}")
LIMIT=$((64 * 1024 * 1024))
TESTS=(test_gpt2_cuda test_invariants_cuda test_kernels_cuda test_engine_cuda test_simt_cuda)
PROGRAMS=("${TESTS[@]}" bench_decode_cuda bench_engine_cuda)
DESIGN_PROGRAMS=(bench_lora_cuda bench_speculative_cuda)

if [ $build = 1 ]; then
  # Machine code for the GPUs it runs on (a build folder CI configured holds PTX alone).
  targets="${PROGRAMS[*]} ${DESIGN_PROGRAMS[*]}"
  [ $server = 0 ] || targets="$targets servekit_gpu servekit_cli"
  SERVEKIT_TARGETS="$targets" bash "$ROOT/scripts/build.sh" \
    -DSERVEKIT_CUDA=ON "-DSERVEKIT_CUDA_ARCHITECTURES=80-real;90"
fi
# The tracked files that travel beside each folder (bytes).
tree=$(git -C "$ROOT" ls-files -z 2>/dev/null | (cd "$ROOT" && xargs -0 du -cb 2>/dev/null) |
  tail -1 | cut -f1) || tree=""
# size_check NAME DIR: prints DIR's size with the checkout's; fails past the carry.
size_check() {
  local size
  size=$(du -sb "$2" | cut -f1)
  echo "gpu_bundle: $1 $2: $((size / 1024 / 1024)) MiB ($size bytes) of the 64 MiB carry"
  if [ "$size" -ge "$LIMIT" ]; then
    echo "gpu_bundle: $2 is larger than the 64 MiB the device machine can carry" >&2
    exit 1
  fi
  if [ -n "$tree" ]; then
    echo "gpu_bundle: with the checkout's tracked files ($((tree / 1024 / 1024)) MiB): $(((size + tree) / 1024 / 1024)) MiB travel"
    [ $((size + tree)) -lt "$LIMIT" ] ||
      echo "gpu_bundle: warning: $2 and the checkout together pass the 64 MiB a device call carries" >&2
  fi
}

# collect DIR PROGRAM...: each program, stripped, into DIR/bin.
collect() {
  local dir=$1 p f extra
  shift
  rm -rf "$dir"
  mkdir -p "$dir/bin"
  for p in "$@"; do
    f=$(find "$BUILD" -type f -name "$p" -perm -u+x -print -quit)
    [ -n "$f" ] || { echo "gpu_bundle: $p is not built in $BUILD" >&2; exit 1; }
    # Without the host symbol tables (a seventh of each program): the device code, and its names
    # in a sanitizer's report, stay.
    strip -o "$dir/bin/$p" "$f"
    # Only glibc's libraries may be needed at run time (libcuda is opened by the runtime).
    extra=$(readelf -d "$dir/bin/$p" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' |
      grep -Ev '^(libc|libm|libdl|libpthread|librt|ld-linux-x86-64)\.so' || true)
    if [ -n "$extra" ]; then
      echo "gpu_bundle: $p needs shared libraries a GPU machine may lack: $extra" >&2
      exit 1
    fi
  done
}

collect "$BUNDLE" "${PROGRAMS[@]}"
for t in "${TESTS[@]}"; do
  # Catch2 2's listing exits with the number of tests it listed; a signal is a crash.
  rc=0
  "$BUNDLE/bin/$t" --list-test-names-only >"$BUNDLE/$t.tests" || rc=$?
  if [ $rc -ge 128 ]; then
    echo "gpu_bundle: $t crashed listing its tests (exit $rc)" >&2
    exit 1
  fi
done
{
  echo "commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -n)"
  for p in "${PROGRAMS[@]}"; do
    printf '%s %s bytes' "$p" "$(stat -c %s "$BUNDLE/bin/$p")"
    case " ${TESTS[*]} " in *" $p "*) printf ', %s tests' "$(grep -c . "$BUNDLE/$p.tests")" ;; esac
    echo
  done
} >"$BUNDLE/manifest.txt"
size_check "bundle (${PROGRAMS[*]})" "$BUNDLE"

# The server folder: servekit-gpu and the shared libraries it needs beyond glibc and the driver.
write_server() {
  f="$BUILD/apps/servekit-gpu"
  [ -x "$f" ] || { echo "gpu_bundle: servekit-gpu is not built in $BUILD/apps" >&2; exit 1; }
  rm -rf "$SERVER"
  mkdir -p "$SERVER/bin" "$SERVER/lib"
  strip -o "$SERVER/bin/servekit-gpu" "$f"
  ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
    case "$name" in
    libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux* | libcuda.so*) ;;
    *) cp -L "$path" "$SERVER/lib/$name" ;;
    esac
  done
  # What the host backend answers to the server check's greedy requests, from the host CLI (the
  # shipped one: the build has other programs of that name, e.g. the tests' sanitizer build).
  host_cli="$BUILD/apps/servekit"
  [ -x "$host_cli" ] || { echo "gpu_bundle: servekit (the host CLI) is not built in $BUILD/apps" >&2; exit 1; }
  python3 "$ROOT/scripts/gpu_server_check.py" --bin "$host_cli" --backend host \
    --record "$SERVER/expected.json"
  {
    echo "commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "built $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -n)"
    echo "servekit-gpu $(stat -c %s "$SERVER/bin/servekit-gpu") bytes; lib: $(cd "$SERVER/lib" && ls | tr '\n' ' ')"
  } >"$SERVER/manifest.txt"
  size_check "server (servekit-gpu and its libraries)" "$SERVER"
}
if [ $server = 1 ]; then write_server; else echo "gpu_bundle: no server folder (--no-server)"; fi

# The designs folder: the design comparisons' benchmarks on the device.
collect "$DESIGNS" "${DESIGN_PROGRAMS[@]}"
{
  echo "commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -n)"
  for p in "${DESIGN_PROGRAMS[@]}"; do echo "$p $(stat -c %s "$DESIGNS/bin/$p") bytes"; done
} >"$DESIGNS/manifest.txt"
size_check "designs (${DESIGN_PROGRAMS[*]})" "$DESIGNS"
if [ -n "$tree" ]; then
  both=$(($(du -sb "$BUNDLE" | cut -f1) + $(du -sb "$DESIGNS" | cut -f1) + tree))
  echo "gpu_bundle: bundle, designs and the tracked files together: $((both / 1024 / 1024)) MiB"
  [ "$both" -lt "$LIMIT" ] ||
    echo "gpu_bundle: warning: the bundle and the designs folder need a call each" >&2
fi
