#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Decode on a shared machine: servekit's thread pool against OpenMP loops, alone and beside
one competing busy process.

    python3 bench/shared_machine.py [--build build] [--rounds 5] [--decode 64] [--out out/shared_machine]

Runs bench_decode_host (kernels on servekit's pool) and bench_decode_host_openmp (the same
kernels on OpenMP loops with GNU OpenMP's default wait policy) in interleaved rounds, each
case once per round: A B C ... A B C ..., so drift of the machine's speed hits every case
alike. "busy" starts one process that spins on a core for the whole run. Prints the median
decode tokens/s of each case with its min and max and the 1-minute load average seen, and
writes CSV + PNG (matplotlib, when importable) into --out.
"""
import argparse
import csv
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

SPIN = [sys.executable, "-c", "while True: pass"]


def run_case(exe: Path, decode: int, threads: int, busy: bool) -> tuple[float, float]:
    spinner = subprocess.Popen(SPIN) if busy else None
    try:
        if spinner:
            time.sleep(0.2)  # the competitor is on a core before the measurement starts
        load = os.getloadavg()[0]
        cmd = [str(exe), "--prefill", "16", "--decode", str(decode)]
        if threads:
            cmd += ["--threads", str(threads)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    finally:
        if spinner:
            spinner.kill()
            spinner.wait()
    m = re.search(r"^decode\s.*= ([0-9.]+) tokens/s", out, re.M)
    if not m:
        raise SystemExit(f"no decode line in the output of {exe}:\n{out}")
    return float(m.group(1)), load


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--out", default="out/shared_machine")
    a = ap.parse_args()
    bench = Path(a.build) / "bench"
    pool, omp = bench / "bench_decode_host", bench / "bench_decode_host_openmp"
    for exe in (pool, omp):
        if not exe.exists():
            raise SystemExit(f"{exe} missing: build it (cmake --build {a.build} --target {exe.name})")
    ncpu = len(os.sched_getaffinity(0))
    cases = [  # (name, binary, threads, busy)
        ("OpenMP loops, alone", omp, 0, False),
        ("servekit pool, alone", pool, 0, False),
        ("OpenMP loops, beside a busy process", omp, 0, True),
        ("servekit pool, beside a busy process", pool, 0, True),
        (f"servekit pool, {max(1, ncpu - 1)} thread(s), beside a busy process", pool,
         max(1, ncpu - 1), True),
    ]
    tps = {c[0]: [] for c in cases}
    loads = {c[0]: [] for c in cases}
    for r in range(a.rounds):
        for name, exe, threads, busy in cases:
            t, load = run_case(exe, a.decode, threads, busy)
            tps[name].append(t)
            loads[name].append(load)
            print(f"round {r + 1}/{a.rounds}  {name:<55} {t:7.2f} tok/s  (load {load:.2f})",
                  file=sys.stderr, flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    print(f"\nGPT-2 124M f32 decode, batch 1, {ncpu} CPUs, {a.rounds} interleaved rounds "
          f"(median, min-max)")
    for name, *_ in cases:
        v = tps[name]
        rows.append({"case": name, "median_tok_s": statistics.median(v), "min": min(v),
                     "max": max(v), "median_load1": statistics.median(loads[name])})
        print(f"  {name:<55} {statistics.median(v):7.2f} tok/s  ({min(v):.2f}-{max(v):.2f})")
    by = {r["case"]: r["median_tok_s"] for r in rows}
    alone_o, alone_p = by[cases[0][0]], by[cases[1][0]]
    busy_o, busy_p = by[cases[2][0]], by[cases[3][0]]
    print(f"  slowdown beside a busy process: OpenMP loops {alone_o / busy_o:.2f}x, "
          f"servekit pool {alone_p / busy_p:.2f}x")
    print(f"  servekit pool / OpenMP loops: alone {alone_p / alone_o:.2f}x, "
          f"beside a busy process {busy_p / busy_o:.2f}x")
    with open(out / "shared_machine.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not importable: no PNG; .venv-server/bin/python has it)",
              file=sys.stderr)
        return 0
    fig, ax = plt.subplots(figsize=(9, 3.6))
    names = [r["case"] for r in rows]
    med = [r["median_tok_s"] for r in rows]
    err = [[m - r["min"] for m, r in zip(med, rows)], [r["max"] - m for m, r in zip(med, rows)]]
    colors = ["#999999" if n.startswith("OpenMP") else "#1f77b4" for n in names]
    ax.barh(names[::-1], med[::-1], xerr=[e[::-1] for e in err], color=colors[::-1])
    ax.set_xlabel("decode tokens/s (median of rounds, bars: min-max)")
    ax.set_title(f"GPT-2 124M decode on {ncpu} CPUs, alone and beside one busy process")
    fig.tight_layout()
    fig.savefig(out / "shared_machine.png", dpi=110)
    print(f"wrote {out / 'shared_machine.csv'} and {out / 'shared_machine.png'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
