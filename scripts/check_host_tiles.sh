#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The host matmul's micro-kernels (kernels/host/matmul.hpp: tile<MR, T>, and tile_strips for
# one and two rows over several strips) only run at their rate if their accumulators stay in
# registers through the k loop. Whether they do is the compiler's choice, and it differs by ISA:
# g++ 12 at -O3 for AVX2 once kept them in memory as well and stored all of them on every k.
# This compiles every tile the ISA's build runs (f32, f16, bf16, uint8 weights) to assembly for
# AVX2 + FMA + F16C (x86-64-v3) and AVX-512 (x86-64-v4), at -O2 and -O3, finds each loop that
# holds an FMA, and fails if such a loop touches the stack. (The SSE2 build, without FMA, is a
# fallback kept for correctness: its 6-row tile needs more than its 16 registers.)
# The same for W8A8's integer tiles (host/linear_i8.hpp) with their dot-product instruction:
# vpdpbusd on zmm (AVX-512 VNNI) and on ymm VEX-encoded (AVX-VNNI, which no machine here runs:
# this is its compile check), vpmaddubsw (AVX2's sign-and-multiply step, host/i8_isa.hpp).
#   scripts/check_host_tiles.sh [c++ compiler] [work dir]
set -euo pipefail
CXX=$(command -v "${1:-g++}")
WORK=${2:-$(mktemp -d)}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$WORK"
SRC="$WORK/tiles.cpp"
{
  echo '#include "servekit/kernels/host/matmul.hpp"'
  echo 'namespace h = servekit::kernels::host;'
  # tile_rows<T> holds tile<1..kMR, T>, and tile_packed<T> the multi-strip tiles of one and two
  # rows: the tiles this ISA's build runs.
  for T in float servekit::half_t servekit::bf16_t std::uint8_t; do
    echo "template void h::tile_rows<$T>(int, float*, int, const float*, int, const $T*, int64_t, int);"
    echo "template void h::tile_packed<$T>(int, float*, int, const float*, int, const $T*, int64_t, int, int);"
  done
} >"$SRC"

# One line per loop with an FMA: "<function> <loop label> <FMAs> <stack references>". A loop is
# a label with a later jump back to it.
loops() {
  awk '/^_ZN8servekit7kernels4host(4tile|11tile_strips)/ { sub(":", "", $1); fn = $1 }
       /^\.L[0-9]+:/ { lab = $1; sub(":", "", lab); f = 0; s = 0 }
       /vfmadd/ { f++ }
       /\(%rsp\)|\(%rbp\)/ { s++ }
       /^[ \t]+j[a-z]+[ \t]+\.L[0-9]+/ { if ($2 == lab && f > 0) print fn, lab, f, s }' "$1"
}

fail=0
printf '%-10s %-3s %6s %18s\n' "-march" "-O" "loops" "touching the stack"
for arch in x86-64-v3 x86-64-v4; do
  for opt in -O2 -O3; do
    asm="$WORK/tiles-$arch$opt.s"
    "$CXX" -std=c++20 "$opt" -march="$arch" -fopenmp -I"$ROOT/include" -S "$SRC" -o "$asm"
    total=$(loops "$asm" | wc -l)
    bad=$(loops "$asm" | awk '$4 > 0' | wc -l)
    printf '%-10s %-3s %6d %18d\n' "$arch" "$opt" "$total" "$bad"
    if [ "$total" -eq 0 ]; then
      echo "check_host_tiles: no FMA loop found in $asm; the check no longer matches the code" >&2
      fail=1
    fi
    if [ "$bad" -gt 0 ]; then
      loops "$asm" | awk '$4 > 0 { printf "  %s: loop %s, %d stack references\n", $1, $2, $4 }' |
        c++filt | head -8
      fail=1
    fi
  done
done
# W8A8: loops holding the ISA's integer dot product, in tile_i8 or inlined into tile_i8_rows.
SRC8="$WORK/tiles_i8.cpp"
{
  echo '#include "servekit/kernels/host/linear_i8.hpp"'
  echo 'namespace h = servekit::kernels::host;'
  echo 'template void h::tile_i8_rows<h::kNSq>(int, int32_t*, int, const h::ActCode*, int64_t, const int8_t*, int64_t, int);'
} >"$SRC8"
loops8() {
  awk -v insn="$2" '/^_Z[A-Z]*N8servekit7kernels4host(7tile_i8|12tile_i8_rows)/ { sub(":", "", $1); fn = $1 }
       /^\.L[0-9]+:/ { lab = $1; sub(":", "", lab); f = 0; s = 0 }
       $0 ~ insn { f++ }
       /\(%rsp\)|\(%rbp\)/ { s++ }
       /^[ \t]+j[a-z]+[ \t]+\.L[0-9]+/ { if ($2 == lab && f > 0) print fn, lab, f, s }' "$1"
}
printf '%-34s %-24s %6s %18s\n' "w8a8 flags" "instruction" "loops" "touching the stack"
for spec in "-march=x86-64-v4 -mavx512vnni|vpdpbusd[^,]*%zmm" \
            "-march=x86-64-v3 -mavxvnni|\{vex\} vpdpbusd[^,]*%ymm" "-march=x86-64-v3|vpmaddubsw"; do
  flags=${spec%%|*} insn=${spec#*|}
  asm="$WORK/tiles_i8-$(echo "$flags" | tr -d ' =').s"
  # shellcheck disable=SC2086
  "$CXX" -std=c++20 -O3 $flags -fopenmp -I"$ROOT/include" -S "$SRC8" -o "$asm"
  total=$(loops8 "$asm" "$insn" | wc -l)
  bad=$(loops8 "$asm" "$insn" | awk '$4 > 0' | wc -l)
  printf '%-34s %-24s %6d %18d check\n' "$flags" "${insn%%\[*}" "$total" "$bad"
  if [ "$total" -eq 0 ] || [ "$bad" -gt 0 ]; then
    echo "check_host_tiles: w8a8 with $flags: $total loops with $insn, $bad touching the stack" >&2
    fail=1
  fi
done
exit $fail
