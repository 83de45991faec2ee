#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer targets (fuzz/, clang) and runs each for a while from the committed seed
# corpus. Fails if any finds a crash, a sanitizer report, a leak or a timeout; the input that
# did it is left in build/fuzz/crashes. Prints each target's executions and coverage, and adds
# a line per run to a ledger: a target's executions add up over the runs of a campaign of
# several sittings, as continuous fuzzing counts them. The campaign's ledger (--until) is
# fuzz/campaign.csv, kept in the repository so that it outlives any one machine; other runs
# go to build/fuzz/campaign.csv.
#   usage: scripts/fuzz.sh [SECONDS per target, default 60] [TARGET ...]
#          scripts/fuzz.sh --runs N [TARGET ...]   N inputs each from seed 1: the same inputs on
#                                                  every machine, so a CI failure reproduces
#          scripts/fuzz.sh --until N [TARGET ...]  sittings of 600 s per target until its total
#                                                  in the ledger reaches N executions (a campaign
#                                                  that can stop and resume; several can run at
#                                                  once on different targets; SIGINT to its
#                                                  fuzzer stops the command after the ledger)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
until_total=0
if [ "${1:-}" = --runs ]; then
  limit=(-runs="$2" -seed=1)
  shift 2
elif [ "${1:-}" = --until ]; then
  until_total="$2"
  limit=(-max_total_time=600)
  shift 2
else
  limit=(-max_total_time="${1:-60}")
  shift || true
fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(tokenizer_encode safetensors_file hf_config vocab_files adapter_config http_request json_schema
  http_transport)
build="${SERVEKIT_BUILD_DIR:-$root/build}/fuzz"
if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found (Debian: clang, libclang-rt-14-dev)" >&2
  exit 1
fi
mkdir -p "$build"
# One build at a time in the folder, when campaigns on different targets start together.
(
  flock 9
  cmake -S "$root/fuzz" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ >/dev/null
  cmake --build "$build" -j"$(nproc)" --target $(printf 'fuzz_%s ' "${targets[@]}") >/dev/null
) 9>"$build/.build.lock"
mkdir -p "$build/crashes"
ledger="$build/campaign.csv"
[ "$until_total" -gt 0 ] && ledger="$root/fuzz/campaign.csv"
ledger_total() { awk -F, -v t="$1" '$2 == t {n += $3} END {print n + 0}' "$ledger" 2>/dev/null || echo 0; }
status=0
# One sitting of target $1: its executions and coverage go to the ledger.
sitting() {
  local t=$1
  corpus="$build/corpus/$t"  # grows as the fuzzer finds new inputs; seeded from the repo
  mkdir -p "$corpus"
  cp -n "$root/fuzz/corpus/$t/"* "$corpus/" 2>/dev/null || true
  log="$build/$t.log"
  start=$(date +%s)
  local rc=0
  "$build/fuzz_$t" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$build/crashes/$t-" "$corpus" >"$log" 2>&1 || rc=$?
  if [ $rc -eq 0 ]; then
    result=none
    done_line=$(grep -E "^Done [0-9]+ runs" "$log" | tail -1)
    cov=$(grep -oE "cov: [0-9]+ ft: [0-9]+" "$log" | tail -1)
    echo "fuzz $t: ${done_line:-?}; ${cov:-?}; corpus $(ls "$corpus" | wc -l) inputs"
  elif [ $rc -eq 72 ]; then  # libFuzzer's exit on SIGINT: stopped by hand, nothing found
    result=stopped
    echo "fuzz $t: stopped (SIGINT)"
  else
    result=FAILED
    echo "fuzz $t: FAILED (log: $log)" >&2
    grep -E "ERROR|SUMMARY|runtime error|terminate|Test unit written" "$log" | head -20 >&2
    status=1
  fi
  # The ledger: the executions libFuzzer counted (its final stats, printed on SIGINT too), or
  # its last status line (#N) when something stopped the run harder.
  runs=$(grep -oE "^stat::number_of_executed_units: [0-9]+" "$log" | tail -1 | awk '{print $2}')
  [ -n "$runs" ] || runs=$(grep -oE "^#[0-9]+" "$log" | tail -1 | tr -d '#')
  cov=$(grep -oE "cov: [0-9]+ ft: [0-9]+" "$log" | tail -1 | awk '{print $2 "," $4}')
  [ -s "$ledger" ] || echo "date,target,executions,seconds,cov,ft,corpus,finding,runs" >"$ledger"
  echo "$(date -u +%FT%TZ),$t,${runs:-0},$(($(date +%s) - start)),${cov:-,},$(ls "$corpus" | wc -l),$result,1" >>"$ledger"
  echo "fuzz $t: $(ledger_total "$t") executions over the runs in $ledger"
  [ "$result" = none ] && return 0
  [ "$result" = stopped ] && return 2
  return 1
}
for t in "${targets[@]}"; do
  if [ "$until_total" -gt 0 ]; then
    while [ "$(ledger_total "$t")" -lt "$until_total" ]; do
      code=0
      sitting "$t" || code=$?
      [ $code -eq 2 ] && exit $status  # stopped by hand: the whole campaign stops
      [ $code -eq 0 ] || break         # a finding: on to the next target
    done
  else
    sitting "$t" || true
  fi
done
exit $status
