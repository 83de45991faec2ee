#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# servekit's host backend beside the CPU engines people use (CTranslate2, llama.cpp, HF
# transformers) on one seeded random GPT-2 124M checkpoint: greedy agreement, then prefill and
# batch 1 / 8 / 32 decode in interleaved rounds, each run its own process, 2 threads each, with
# the machine's read bandwidth, fp32 FMA peak and int8 dot-product peak measured before and
# after the rounds (printed above the table, out/.../peaks.csv, the chart's title).
#   bash bench/peers/run.sh [--rounds N] [--smoke] [--isa avx2] [--out DIR]
#                                              (default: 5 rounds, this CPU's ISA, out/peers)
# --smoke: 1 round, 16-token prompt, 8 decode steps, batches 1 and 8: checks that all runs.
# --only servekit:f32,llama:f32: just those engine:format pairs (and HF fp32, the reference).
# --isa avx2: every engine held to AVX2 + FMA + F16C, as on machines without AVX-512: servekit
#   built with -march=x86-64-v3 (in build-avx2), llama.cpp built again for AVX2 alone (in
#   .venv-peers/llama-avx2), CTranslate2 with CT2_FORCE_CPU_ISA=AVX2, torch with
#   ATEN_CPU_CAPABILITY=avx2, MKL and oneDNN held to AVX2 too. Results in out/peers-avx2.
# Installs into .venv-peers, from PyPI: ctranslate2, transformers, torch (PyPI's wheel, which
# brings its CUDA libraries; they stay unused), numpy, safetensors, matplotlib; and tries to
# build llama-cpp-python from source (CPU only, at most $PEERS_LLAMA_TIMEOUT s, default 900). A
# failed build is remembered in .venv-peers/llama-cpp-python.failed and not retried until that
# file is deleted; the benchmark then says why llama.cpp is missing and goes on without it.
# PEERS_JOBS: compile jobs (default: every CPU). Not run by CI: long, and it downloads.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="$root/.venv-peers"
jobs="${PEERS_JOBS:-$(nproc)}"
llama_timeout="${PEERS_LLAMA_TIMEOUT:-900}"
out="" args=() isa=native
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) [ $# -ge 2 ] || { echo "run.sh: --rounds needs a number" >&2; exit 2; }
              args+=(--rounds "$2"); shift 2 ;;
    --smoke) args+=(--smoke); shift ;;
    --only) [ $# -ge 2 ] || { echo "run.sh: --only needs engine:format[,...]" >&2; exit 2; }
            args+=(--only "$2"); shift 2 ;;
    --out) [ $# -ge 2 ] || { echo "run.sh: --out needs a folder" >&2; exit 2; }
           out="$2"; shift 2 ;;
    --isa) [ $# -ge 2 ] && [[ "$2" =~ ^(native|avx2)$ ]] ||
             { echo "run.sh: --isa takes native or avx2" >&2; exit 2; }
           isa="$2"; shift 2 ;;
    -h|--help) sed -n '3,21p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (--rounds N, --smoke, --only PAIRS, --isa avx2," \
         "--out DIR)" >&2
       exit 2 ;;
  esac
done
if [ "$isa" = avx2 ]; then
  build="${SERVEKIT_BUILD_DIR:-$root/build-avx2}" out="${out:-$root/out/peers-avx2}"
  llama_dir="$venv/llama-avx2"
  # ggml's own switches for an AVX2 + FMA + F16C machine, nothing wider.
  llama_isa="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF \
-DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF"
  # CTranslate2's and torch's own kernels, and the GEMM libraries under them (MKL, oneDNN).
  export CT2_FORCE_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 \
    ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2 PYTHONPATH="$llama_dir"
  args+=(--isa "AVX2 + FMA + F16C (x86-64-v3)")
else
  build="${SERVEKIT_BUILD_DIR:-$root/build}" out="${out:-$root/out/peers}"
  llama_dir="" llama_isa="-DGGML_NATIVE=ON"
  args+=(--isa "this CPU's (-march=native)")
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"

echo "peers: Python packages in $venv (PyPI): ctranslate2 transformers torch numpy safetensors" \
  "matplotlib, and llama-cpp-python built from source if it builds"
py="$(bash "$root/tools/pyvenv.sh" "$venv" bench/peers ctranslate2=ctranslate2 \
  transformers=transformers torch=torch numpy=numpy safetensors=safetensors \
  matplotlib=matplotlib | tail -1)"

# llama-cpp-python: its sdist both builds llama.cpp and carries the converter to GGUF, so it is
# downloaded once and used for both.
src="$venv/src" failed="$venv/llama-cpp-python${llama_dir:+-avx2}.failed" llama_missing=""
convert=""
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
  # With --isa avx2 the package is installed a second time, alone, into llama_dir, which
  # PYTHONPATH puts before the venv's own.
  if [ -n "$llama_dir" ]; then
    [ -d "$llama_dir/llama_cpp" ] && return
  else
    "$py" -c "import llama_cpp" 2>/dev/null && return
  fi
  local log="$src/build${llama_dir:+-avx2}.log"
  echo "peers: building llama-cpp-python from source (CPU only, ${llama_dir:+AVX2, }$jobs jobs," \
    "at most ${llama_timeout}s; log: $log)"
  local t0=$SECONDS rc=0
  CMAKE_BUILD_PARALLEL_LEVEL="$jobs" CMAKE_ARGS="$llama_isa -DGGML_CUDA=OFF \
-DGGML_BLAS=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
    timeout "$llama_timeout" "$py" -m pip install -v ${llama_dir:+--no-deps --target "$llama_dir"} \
    "$sdist" >"$log" 2>&1 || rc=$?
  if [ $rc -eq 124 ]; then
    echo "its build did not finish in ${llama_timeout}s" >"$failed"
  elif [ $rc -ne 0 ]; then
    local why
    why="$(grep -m1 -E '(^|[^-])(error:|CMake Error)' "$log" | cut -c1-160 || true)"
    echo "its build failed (exit $rc): ${why:-see $log}" >"$failed"
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
if [ "$isa" = avx2 ]; then
  # Only the one benchmark, for AVX2 + FMA + F16C; no tests, no CUDA.
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVEKIT_BENCH_PEERS=ON \
    -DSERVEKIT_NATIVE=OFF -DCMAKE_CXX_FLAGS=-march=x86-64-v3 -DSERVEKIT_CUDA=OFF \
    -DSERVEKIT_BUILD_TESTS=OFF >/dev/null
else
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVEKIT_BENCH_PEERS=ON >/dev/null
fi
cmake --build "$build" -j"$jobs" --target bench_peers_servekit

export TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1 TQDM_DISABLE=1
# Two threads for every engine; the libraries that read these read them at start.
export OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 SERVEKIT_THREADS=2
"$py" "$root/bench/peers/make_models.py" --out "$out" ${convert:+--gguf-convert "$convert"}
"$py" "$root/bench/peers/peers.py" --out "$out" --servekit "$build/bench/bench_peers_servekit" \
  --llama "$llama_missing" "${args[@]}"
