#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# servekit's host backend beside the CPU engines people use (CTranslate2, llama.cpp, HF
# transformers) on one seeded random GPT-2 124M checkpoint: greedy agreement, then prefill and
# batch 1 / 8 / 32 decode in interleaved rounds, each run its own process, 2 threads each.
#   bash bench/peers/run.sh [--rounds N] [--smoke] [--out DIR]     (default: 5 rounds, out/peers)
# --smoke: 1 round, 16-token prompt, 8 decode steps, batches 1 and 8: checks that all runs.
# Installs into .venv-peers, from PyPI: ctranslate2, transformers, torch (PyPI's wheel, which
# brings its CUDA libraries; they stay unused), numpy, safetensors, matplotlib; and tries to
# build llama-cpp-python from source (CPU only, at most $PEERS_LLAMA_TIMEOUT s, default 900). A
# failed build is remembered in .venv-peers/llama-cpp-python.failed and not retried until that
# file is deleted; the benchmark then says why llama.cpp is missing and goes on without it.
# PEERS_JOBS: compile jobs (default: every CPU). Not run by CI: long, and it downloads.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="$root/.venv-peers"
build="${SERVEKIT_BUILD_DIR:-$root/build}"
jobs="${PEERS_JOBS:-$(nproc)}"
llama_timeout="${PEERS_LLAMA_TIMEOUT:-900}"
out="$root/out/peers" args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) [ $# -ge 2 ] || { echo "run.sh: --rounds needs a number" >&2; exit 2; }
              args+=(--rounds "$2"); shift 2 ;;
    --smoke) args+=(--smoke); shift ;;
    --out) [ $# -ge 2 ] || { echo "run.sh: --out needs a folder" >&2; exit 2; }
           out="$2"; shift 2 ;;
    -h|--help) sed -n '3,13p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (--rounds N, --smoke, --out DIR)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
out="$(cd "$out" && pwd)"

echo "peers: Python packages in $venv (PyPI): ctranslate2 transformers torch numpy safetensors" \
  "matplotlib, and llama-cpp-python built from source if it builds"
py="$(bash "$root/tools/pyvenv.sh" "$venv" bench/peers ctranslate2=ctranslate2 \
  transformers=transformers torch=torch numpy=numpy safetensors=safetensors \
  matplotlib=matplotlib | tail -1)"

# llama-cpp-python: its sdist both builds llama.cpp and carries the converter to GGUF, so it is
# downloaded once and used for both.
src="$venv/src" failed="$venv/llama-cpp-python.failed" llama_missing="" convert=""
try_llama() {
  mkdir -p "$src"
  local sdist
  sdist="$(ls "$src"/llama_cpp_python-*.tar.gz 2>/dev/null | tail -1 || true)"
  if [ -z "$sdist" ]; then
    echo "peers: downloading the llama-cpp-python sdist"
    "$py" -m pip download -q --no-deps --no-binary :all: llama-cpp-python -d "$src" >&2 ||
      { echo "sdist download failed" >"$failed"; return; }
    sdist="$(ls "$src"/llama_cpp_python-*.tar.gz | tail -1)"
  fi
  local convert_dir="$src/llama.cpp-convert"
  if [ ! -f "$convert_dir/convert_hf_to_gguf.py" ]; then
    mkdir -p "$convert_dir"
    local top
    top="$(basename "$sdist" .tar.gz)/vendor/llama.cpp"
    tar xzf "$sdist" -C "$convert_dir" --strip-components=3 "$top/convert_hf_to_gguf.py" \
      "$top/conversion" "$top/gguf-py"
  fi
  convert="$convert_dir/convert_hf_to_gguf.py"
  "$py" -c "import llama_cpp" 2>/dev/null && return
  echo "peers: building llama-cpp-python from source (CPU only, $jobs jobs, at most" \
    "${llama_timeout}s; log: $src/build.log)"
  local t0=$SECONDS rc=0
  CMAKE_BUILD_PARALLEL_LEVEL="$jobs" CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_CUDA=OFF \
-DGGML_BLAS=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
    timeout "$llama_timeout" "$py" -m pip install -v "$sdist" >"$src/build.log" 2>&1 || rc=$?
  if [ $rc -eq 124 ]; then
    echo "its build did not finish in ${llama_timeout}s" >"$failed"
  elif [ $rc -ne 0 ]; then
    local why
    why="$(grep -m1 -E '(^|[^-])(error:|CMake Error)' "$src/build.log" | cut -c1-160 || true)"
    echo "its build failed (exit $rc): ${why:-see $src/build.log}" >"$failed"
  else
    echo "peers: llama-cpp-python built in $((SECONDS - t0)) s"
  fi
}
[ -f "$failed" ] || try_llama
if [ -f "$failed" ]; then
  llama_missing="llama-cpp-python: $(cat "$failed"); delete $failed to try again"
  convert=""
fi

echo "peers: building bench_peers_servekit"
[ -f "$build/build.ninja" ] || bash "$root/scripts/setup.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVEKIT_BENCH_PEERS=ON >/dev/null
cmake --build "$build" -j"$jobs" --target bench_peers_servekit

export TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1 TQDM_DISABLE=1
# Two threads for every engine; the libraries that read these read them at start.
export OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 SERVEKIT_THREADS=2
"$py" "$root/bench/peers/make_models.py" --out "$out" ${convert:+--gguf-convert "$convert"}
"$py" "$root/bench/peers/peers.py" --out "$out" --servekit "$build/bench/bench_peers_servekit" \
  --llama "$llama_missing" "${args[@]}"
