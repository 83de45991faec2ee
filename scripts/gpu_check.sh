#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU's verdict, on a machine with an NVIDIA GPU, from the bundle scripts/gpu_bundle.sh
# built elsewhere (.gpu-bundle/, carried along): nothing is compiled here. In steps that each
# end well inside the device tool's 10 minutes a call:
#   scripts/gpu_check.sh tests      every device test (test_gpt2_cuda, test_invariants_cuda,
#                                   test_kernels_cuda, test_engine_cuda, test_simt_cuda)
#   scripts/gpu_check.sh sanitize   compute-sanitizer memcheck on every device test; racecheck,
#                                   synccheck and initcheck on the kernels and the decode steps
#   scripts/gpu_check.sh bench      bench_decode_cuda beside the read bandwidth of the same run,
#                                   batch 8 with one column tile a block, batches 16-64 with and
#                                   without split-K, and bench_engine_cuda
#                                   (the course's workload, Poisson arrivals: TTFT, TPOT, tokens/s)
#   scripts/gpu_check.sh hf         GPT-2 124M's shape against HF: tools/make_reference.py makes
#                                   a seeded random 124M checkpoint and HF's logits with this
#                                   machine's torch, then test_gpt2_cuda "[.hf124m]" (minutes)
#   scripts/gpu_check.sh profile    ncu: each decode kernel's time per launch (two warm steps) for
#                                   f16 at batch 1, f32 at batch 8 and u8 at batch 64; the full
#                                   report of one launch of the slowest (ncu_<name>.txt)
#   scripts/gpu_check.sh server     servekit-gpu serve --backend cuda (.gpu-server/, carried in a
#                                   call of its own): the real clients' subset in plain HTTP
#                                   (greedy tokens against the host backend's, streams, two
#                                   adapters, a JSON schema, seeds), then the course's client
#                                   workload at 1, 8 and 32 clients (TTFT, TPOT, tokens/s)
#   scripts/gpu_check.sh designs    the design comparisons on the device (.gpu-designs/, carried
#                                   beside .gpu-bundle or alone): bench_lora_cuda (each LoRA dispatch
#                                   beside the base step and the floor, decode and prefill, 1 / 8
#                                   / 64 rows on their own, 8 shared and one adapter) and
#                                   bench_speculative_cuda (n-gram speculation: step costs,
#                                   acceptance and speedup at batches 1 / 4 / 16)
#   scripts/gpu_check.sh all        tests, sanitize and bench, for one call on a warm machine
#   scripts/gpu_check.sh tests,bench,designs   any steps joined by commas, in that order
# Each step writes gpu_<step>.md (and gpu_check.log, CSVs) into $OUT if set, else .gpu-report/,
# and fails when a program does not start, a test fails, or a test program runs no test.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE="${SERVEKIT_GPU_BUNDLE:-$ROOT/.gpu-bundle}"
SERVER="${SERVEKIT_GPU_SERVER:-$ROOT/.gpu-server}"
DESIGNS="${SERVEKIT_GPU_DESIGNS:-$ROOT/.gpu-designs}"
STEPS=${1:-all}
REPORT_DIR=${2:-${OUT:-$ROOT/.gpu-report}}
LIMIT_S=${SERVEKIT_GPU_STEP_LIMIT:-200}  # per command; a hang must not eat the whole call
# STEPS: one step, or several joined by commas, run in that order in one call (all is
# tests,sanitize,bench).
[ "$STEPS" = all ] && STEPS=tests,sanitize,bench
IFS=, read -r -a STEP_LIST <<<"$STEPS"
[ ${#STEP_LIST[@]} -gt 0 ] || STEP_LIST=(all)
for step in "${STEP_LIST[@]}"; do
  case "$step" in tests | sanitize | bench | hf | profile | server | designs) ;; *)
    echo "gpu_check: unknown step '$step' (tests, sanitize, bench, hf, profile, server, designs or all; several joined by commas)" >&2
    exit 2
    ;;
  esac
done
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU here (nvidia-smi -L failed); nothing to check" >&2
  exit 2
fi
# manifest_of STEP: the manifest of the folder STEP runs from.
manifest_of() {
  case "$1" in
  server) echo "$SERVER/manifest.txt" ;;
  designs) echo "$DESIGNS/manifest.txt" ;;
  *) echo "$BUNDLE/manifest.txt" ;;
  esac
}
need_bundle=0
for step in "${STEP_LIST[@]}"; do
  if [ ! -f "$(manifest_of "$step")" ]; then
    case "$step" in
    server) echo "gpu_check: no server folder at $SERVER: run scripts/gpu_bundle.sh where nvcc is, carry .gpu-server" >&2 ;;
    designs) echo "gpu_check: no designs folder at $DESIGNS: run scripts/gpu_bundle.sh where nvcc is, carry .gpu-designs" >&2 ;;
    *) echo "gpu_check: no bundle at $BUNDLE: run scripts/gpu_bundle.sh where nvcc is, carry .gpu-bundle" >&2 ;;
    esac
    exit 2
  fi
  case "$step" in server | designs) ;; *) need_bundle=1 ;; esac
done
MANIFEST=$(manifest_of "${STEP_LIST[0]}")
# The bundle's test programs: those gpu_bundle.sh listed (bin/NAME and NAME.tests).
TESTS=()
for f in "$BUNDLE"/*.tests; do [ -e "$f" ] && TESTS+=("$(basename "$f" .tests)"); done
if [ ${#TESTS[@]} -eq 0 ] && [ $need_bundle = 1 ]; then
  echo "gpu_check: the bundle at $BUNDLE lists no test program" >&2
  exit 2
fi
cd "$ROOT"  # the test programs find tests/fixtures and data/ from here
mkdir -p "$REPORT_DIR"
LOG="$REPORT_DIR/gpu_check.log"
SANITIZER=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
status=0
LAST_OUT=
# The test programs' JUnit files stay here: the device tool brings back only a few files, and
# each step's report lists their test cases.
XML=$(mktemp -d)
trap 'rm -rf "$XML"' EXIT

header() {
  echo "# servekit GPU check: $1, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
  echo "- bundle: $(head -1 "$MANIFEST"); $(sed -n 2p "$MANIFEST")"
  echo "- checkout here: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo
}

# run_step REPORT NAME XML CMD...: runs CMD (at most LIMIT_S seconds), logs its output, records
# pass / fail in REPORT. XML (or -): the Catch2 JUnit file a test program writes; its test
# cases are listed under the step, and a test program that ran none has not passed.
run_step() {
  local report=$1 name=$2 xml=$3
  shift 3
  echo "== $name: $*" | tee -a "$LOG"
  local t0=$SECONDS out rc
  out=$(timeout "$LIMIT_S" "$@" 2>&1)
  rc=$?
  printf '%s\n' "$out" >>"$LOG"
  LAST_OUT=$out
  local summary="" cases=""
  summary=$(printf '%s\n' "$out" | grep -E 'ERROR SUMMARY' | tail -1)
  if [ "$xml" != - ]; then
    if [ -s "$xml" ]; then
      cases=$(junit_cases "$xml")
      summary="$(printf '%s\n' "$cases" | grep -c '^  - ') test cases, $(printf '%s\n' "$cases" |
        grep -c "^  - .*\*\*FAILED\*\*") failed; $summary"
    fi
    if [ $rc -eq 0 ] && ! printf '%s\n' "$cases" | grep -q '^  - '; then
      rc=3  # passed with zero tests: not a pass
      summary="no test ran; $summary"
    fi
  fi
  if [ $rc -eq 0 ]; then
    echo "- $name: passed ($((SECONDS - t0)) s) $summary" >>"$report"
    echo "   passed"
  else
    local why="exit $rc"
    [ $rc -eq 124 ] && why="timed out after $LIMIT_S s"
    [ $rc -eq 69 ] && why="exit 69: the program found no CUDA device"
    echo "- $name: **FAILED** ($why, $((SECONDS - t0)) s; gpu_check.log) $summary" >>"$report"
    echo "   FAILED ($why)"
    status=1
  fi
  [ -n "$cases" ] && printf '%s\n' "$cases" >>"$report"
  return 0
}

# Each test case of a Catch2 JUnit file: "  - name: passed (s)" or "  - name: **FAILED** (s)",
# a failure followed by its first assertion's expression, expansion and messages (indented), so
# that a report brought back from the GPU machine says what failed without another run.
junit_cases() {
  python3 - "$1" <<'PY'
import sys
import xml.etree.ElementTree as ET
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    bad = [e for e in case if e.tag in ("failure", "error")]
    print(f"  - {case.get('name')}: {'**FAILED**' if bad else 'passed'} ({case.get('time')} s)")
    for e in bad[:1]:
        lines = [e.get("message") or ""] + (e.text or "").strip().splitlines()
        for line in [l for l in lines if l.strip()][:12]:
            print(f"    > {line.strip()[:200]}")
PY
}

step_tests() {
  local r="$REPORT_DIR/gpu_tests.md"
  header "device tests" >"$r"
  for t in "${TESTS[@]}"; do
    run_step "$r" "$t" "$XML/$t.xml" "$BUNDLE/bin/$t" -r junit -o "$XML/$t.xml"
  done
  cat "$r"
}

step_sanitize() {
  local r="$REPORT_DIR/gpu_sanitize.md"
  header "compute-sanitizer" >"$r"
  for t in "${TESTS[@]}"; do
    run_step "$r" "memcheck $t" "$XML/memcheck_$t.xml" "$SANITIZER" --tool memcheck \
      --error-exitcode 9 "$BUNDLE/bin/$t" -r junit -o "$XML/memcheck_$t.xml"
  done
  for tool in racecheck synccheck initcheck; do
    run_step "$r" "$tool test_simt_cuda" "$XML/${tool}_simt.xml" "$SANITIZER" --tool "$tool" \
      --error-exitcode 9 "$BUNDLE/bin/test_simt_cuda" -r junit -o "$XML/${tool}_simt.xml"
    # The kernel tests less the sampler's statistical cases (thousands of rows each) and the
    # linears' and attention's bitwise batching sweeps (hundreds of launches each), keeping one
    # case of each kernel family: both sampler shapes over mixed parameters, every tensor-core
    # and uint8 linear shape, both attention kernels over both cache layouts.
    run_step "$r" "$tool test_kernels_cuda" "$XML/${tool}_kernels.xml" "$SANITIZER" \
      --tool "$tool" --error-exitcode 9 "$BUNDLE/bin/test_kernels_cuda" \
      "~[sampling]~[linear]~[attention],each row samples with its own parameters*,tensor-core linear matches*,uint8 linear per tensor*,flash prefill attention matches*,split-rows decode attention matches*" \
      -r junit \
      -o "$XML/${tool}_kernels.xml"
    run_step "$r" "$tool test_gpt2_cuda [budget],[graphs]" "$XML/${tool}_gpt2.xml" \
      "$SANITIZER" --tool "$tool" --error-exitcode 9 "$BUNDLE/bin/test_gpt2_cuda" \
      "[budget],[graphs]" -r junit -o "$XML/${tool}_gpt2.xml"
  done
  cat "$r"
}

step_bench() {
  local r="$REPORT_DIR/gpu_bench.md"
  header "decode on the Cuda backend" >"$r"
  run_step "$r" "bench_decode_cuda" - "$BUNDLE/bin/bench_decode_cuda" --csv "$REPORT_DIR/decode_cuda.csv"
  { echo; echo '```'; printf '%s\n' "$LAST_OUT"; echo '```'; echo; } >>"$r"
  # From batch 2 on a decode linear's block takes several column tiles (fewer CTAs, x loaded once
  # a block): batch 8 with one tile a block, for the comparison.
  run_step "$r" "bench_decode_cuda --batches 8 --tiles-per-block 1" - \
    "$BUNDLE/bin/bench_decode_cuda" --batches 8 --tiles-per-block 1 \
    --csv "$REPORT_DIR/decode_cuda_one_tile.csv"
  { echo; echo '```'; printf '%s\n' "$LAST_OUT"; echo '```'; echo; } >>"$r"
  # Past 8 rows the CUDA-core linears leave the GEMV for the tiled GEMM, which splits over K up
  # to 64 rows (16-bit: the tensor-core kernel, up to 32): those batches with the split and
  # without it (--no-split-k), in the same run.
  local split
  for split in "" --no-split-k; do
    run_step "$r" "bench_decode_cuda --batches 16 32 64 --prefill-reps 0 $split" - \
      "$BUNDLE/bin/bench_decode_cuda" --batches 16 32 64 --prefill-reps 0 $split \
      --csv "$REPORT_DIR/decode_cuda_split${split:+_off}.csv"
    { echo; echo '```'; printf '%s\n' "$LAST_OUT"; echo '```'; echo; } >>"$r"
  done
  # The engine on the device: the course's workload (static vs continuous), open-loop Poisson
  # arrivals (TTFT, TPOT, tokens/s per scheduler), the batch sweep and a constrained decode
  # step with its masks made before or during the forward; its CSVs stay behind
  # (the device tool brings back few files), its printed tables go into the report.
  if [ -x "$BUNDLE/bin/bench_engine_cuda" ]; then
    local eng
    eng=$(mktemp -d)
    run_step "$r" "bench_engine_cuda" - "$BUNDLE/bin/bench_engine_cuda" --rates 4,16 \
      --poisson-requests 32 --max-sweep 64 --parts course,poisson,sweep,masks --out "$eng"
    # Less its progress lines (carriage returns).
    { echo; echo '```'; printf '%s\n' "$LAST_OUT" | grep -v $'\r'; echo '```'; } >>"$r"
    rm -rf "$eng"
  fi
  cat "$r"
}

step_profile() {
  local r="$REPORT_DIR/gpu_profile.md" ncu cfg
  header "decode kernels under ncu" >"$r"
  ncu=$(command -v ncu || echo "${CUDA_HOME:-/usr/local/cuda}/bin/ncu")
  for cfg in "f16 1" "f32 8" "u8zp 64"; do
    set -- $cfg
    # Past the bandwidth probe, the upload and the prompt: two warm decode steps' kernels (no
    # timed prefill steps, whose launches would come first).
    run_step "$r" "ncu bench_decode_cuda --only $1 --batches $2" - "$ncu" \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum --launch-skip 250 --launch-count 202 \
      -k "regex:linear|attention|lm_head|sample|layernorm|embedding|kv_append|gather" \
      --print-summary per-kernel "$BUNDLE/bin/bench_decode_cuda" --only "$1" --batches "$2" \
      --decode 8 --prefill 64 --prefill-reps 0
    {
      echo
      echo "$1, batch $2: kernel (grid) x launches | unit, min max mean of a launch"
      echo '```'
      printf '%s\n' "$LAST_OUT" | awk '/^  void/ { n = $0; sub(/^  void /, "", n)
          sub(/\(.*\) \(/, " (", n); sub(/, Device.*Invocations/, " x", n) }
        /gpu__time_duration/ { print n " | " $2 " " $3 " " $4 " " $5 }'
      echo '```'
      echo
    } >>"$r"
  done
  # The full ncu report (--set full: throughput, occupancy, stall reasons) of one launch of the
  # slowest kernels those tables showed first: the 16-bit head at batch 1, the decode
  # attention, the CUDA-core tiled linear at batch 64. Each into ncu_<name>.txt.
  # name, composition, batch, matching launches skipped (past the prompt's: the report names
  # the grid it profiled), kernel.
  local name only batches skip kernel
  for cfg in "head f16 1 3 linear_mma.*\(int\)4>" "attention f16 1 30 attention_decode" \
    "tiled u8zp 64 300 linear_tiled"; do
    read -r name only batches skip kernel <<<"$cfg"
    run_step "$r" "ncu --set full: $name ($only, batch $batches)" - "$ncu" --set full \
      --kernel-name-base demangled -k "regex:$kernel" --launch-skip "$skip" --launch-count 1 \
      "$BUNDLE/bin/bench_decode_cuda" --only "$only" --batches "$batches" --decode 4 --prefill 64 \
      --prefill-reps 0
    printf '%s\n' "$LAST_OUT" >"$REPORT_DIR/ncu_$name.txt"
    grep -qE "No kernels were profiled" "$REPORT_DIR/ncu_$name.txt" &&
      echo "  - $name: **no kernel matched** $kernel" >>"$r"
  done
  cat "$r"
}

step_server() {
  local r="$REPORT_DIR/gpu_server.md" body
  header "the HTTP server on the Cuda backend" >"$r"
  echo "- server folder: $(sed -n 3p "$MANIFEST")" >>"$r"
  body=$(mktemp)
  run_step "$r" "gpu_server_check.py" - python3 "$ROOT/scripts/gpu_server_check.py" \
    --bin "$SERVER/bin/servekit-gpu" --lib "$SERVER/lib" --expected "$SERVER/expected.json" \
    --report "$body"
  { echo; cat "$body"; } >>"$r"
  rm -f "$body"
  cat "$r"
}

step_designs() {
  local r="$REPORT_DIR/gpu_designs.md"
  header "design comparisons on the Cuda backend" >"$r"
  # Their CSVs come back in $REPORT_DIR/lora and /speculative (no gnuplot there: plotted here).
  run_step "$r" "bench_lora_cuda" - "$DESIGNS/bin/bench_lora_cuda" --batches 1,8,64 \
    --shares 0,8,1 --phases decode,prefill --ranks mixed,16 --reps 5 --out "$REPORT_DIR/lora"
  # Less each progress line (up to its last carriage return) before the row it shares a line with.
  { echo; echo '```'; printf '%s\n' "$LAST_OUT" | sed 's/.*\r//'; echo '```'; echo; } >>"$r"
  run_step "$r" "bench_speculative_cuda" - "$DESIGNS/bin/bench_speculative_cuda" \
    --vocab "$ROOT/data/gpt2" --batches 1,4,16 --rounds 2 --out "$REPORT_DIR/speculative"
  { echo; echo '```'; printf '%s\n' "$LAST_OUT" | sed 's/.*\r//'; echo '```'; } >>"$r"
  cat "$r"
}

step_hf() {
  local r="$REPORT_DIR/gpu_hf.md" dir
  header "GPT-2 124M against HF" >"$r"
  dir=$(mktemp -d)
  LIMIT_S=${SERVEKIT_GPU_HF_LIMIT:-420} run_step "$r" "make_reference.py --only gpt2-124m" - \
    python3 "$ROOT/tools/make_reference.py" --only gpt2-124m --out "$dir"
  if [ -f "$dir/gpt2-124m/reference.json" ]; then
    SERVEKIT_HF124M="$dir/gpt2-124m" run_step "$r" "test_gpt2_cuda [.hf124m]" "$XML/hf124m.xml" \
      "$BUNDLE/bin/test_gpt2_cuda" "[.hf124m]" -r junit -o "$XML/hf124m.xml"
  fi
  rm -rf "$dir"
  cat "$r"
}

: >>"$LOG"
for step in "${STEP_LIST[@]}"; do
  MANIFEST=$(manifest_of "$step")
  "step_$step"
done
exit $status
