#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""servekit's host backend beside CTranslate2, llama.cpp and HF transformers on one GPT-2 124M
checkpoint (run through bench/peers/run.sh, which installs the peers and makes the models).

1. Agreement: the greedy ids of 16 new tokens after a fixed prompt, every engine and format
   against HF fp32. 32-bit formats should agree exactly; random weights make near-ties, so a
   quantised format that leaves the reference is reported with the step where it does.
2. Interleaved rounds: every (engine, format, measurement) once per round, in the same order,
   each run its own process with the same thread count; the load average is kept beside it.
3. Medians (min-max) per row, with servekit / best peer of the same precision class, written
   as CSV and a PNG bar chart too.
4. The machine's ceilings measured in the same run, before the rounds and after them
   (bench_peers_servekit --mode peaks: read bandwidth, fp32 FMA peak, the int8 dot-product peak
   of the instruction servekit's W8A8 tiles use), printed above the table, in peaks.csv and in
   the chart's title.
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
AGREE_PROMPT = [464, 2068, 7586, 21831, 18045, 625, 262]  # "The quick brown fox jumps over the"
AGREE_NEW = 16
# "/kv16": the same weights with an f16 KV cache, as llama.cpp runs every format by default
# (CTranslate2 keeps its cache in the compute type).
# "/kv8": with the int8 KV cache. w8a8: int8 weights and activations (integer dot products).
SERVEKIT_FORMATS = ["f32", "f32/kv16", "f16", "f16/kv16", "bf16", "u8", "w8a8", "w8a8/kv16",
                    "w8a8/kv8", "f32/kv8", "f16/kv8"]
CT2_FORMATS = ["float32", "int8", "int8_float32", "bfloat16"]
LLAMA_FORMATS = ["f32", "f16", "q8_0"]
# Precision class of what an engine computes with (CTranslate2 reports its compute type: on a
# CPU without a bf16 path a bfloat16 model runs float32, so it is classed by that).
CLASS = {"f32": "32-bit", "f32/kv16": "32-bit", "f16/kv16": "16-bit", "fp32": "32-bit", "float32": "32-bit", "f16": "16-bit",
         "bf16": "16-bit", "bfloat16": "16-bit", "u8": "8-bit", "int8": "8-bit",
         "int8_float32": "8-bit", "q8_0": "8-bit", "w8a8": "8-bit", "w8a8/kv16": "8-bit", "w8a8/kv8": "8-bit",
         "f32/kv8": "32-bit", "f16/kv8": "16-bit"}
CLASSES = ["32-bit", "16-bit", "8-bit"]


def log(*args):
    print(*args, flush=True)


def engines(llama):
    e = [("servekit", f) for f in SERVEKIT_FORMATS] + [("ct2", f) for f in CT2_FORMATS]
    if llama:
        e += [("llama", f) for f in LLAMA_FORMATS]
    return e + [("hf", "fp32")]


def command(a, engine, fmt, mode, extra):
    if engine == "servekit":
        cmd = [str(a.servekit), "--model", str(a.out / "model")]
        if fmt.endswith("/kv16"):
            fmt, cmd = fmt.removesuffix("/kv16"), cmd + ["--kv", "f16"]
        elif fmt.endswith("/kv8"):
            fmt, cmd = fmt.removesuffix("/kv8"), cmd + ["--kv", "i8"]
    else:
        cmd = [sys.executable, str(HERE / "engines.py"), "--engine", engine, "--out", str(a.out)]
    return cmd + ["--format", fmt, "--mode", mode, "--threads", str(a.threads)] + extra


def run_one(a, engine, fmt, mode, extra):
    """Runs one measurement in its own process; its JSON line, or {"error": ...}."""
    load = os.getloadavg()
    p = subprocess.run(command(a, engine, fmt, mode, extra), capture_output=True, text=True)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0 or not lines:
        why = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
        return {"engine": engine, "format": fmt, "measure": mode, "error": why}
    # The format as asked ("f32/kv16"), not as the engine names its weights ("f32").
    return {**json.loads(lines[-1]), "format": fmt, "load1": load[0], "load5": load[1]}


def peaks(a, when):
    """The machine's ceilings at a.threads threads, measured now by servekit's program."""
    p = subprocess.run([str(a.servekit), "--mode", "peaks", "--threads", str(a.threads)],
                       capture_output=True, text=True)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0 or not lines:
        log(f"peaks ({when}): not measured: {(p.stderr.strip().splitlines() or ['?'])[-1]}")
        return None
    r = {**json.loads(lines[-1]), "when": when}
    log(f"peaks ({when}): read {r['read_gbs']:.1f} GB/s, fp32 FMA {r['fma_gflops']:.0f} GFLOP/s, "
        f"int8 ({r['int8_isa']}) {r['int8_gops']:.0f} GOP/s, {r['threads']} threads")
    return r


def peaks_line(ps):
    """One line for the table and the chart: each ceiling's range over the measurements."""
    ps = [p for p in ps if p]
    if not ps:
        return "peaks not measured"
    def span(k, fmt):
        lo, hi = min(p[k] for p in ps), max(p[k] for p in ps)
        return format(lo, fmt) if f"{lo:{fmt}}" == f"{hi:{fmt}}" else f"{lo:{fmt}}-{hi:{fmt}}"
    return (f"read {span('read_gbs', '.1f')} GB/s, fp32 FMA {span('fma_gflops', '.0f')} GFLOP/s, "
            f"int8 ({ps[0]['int8_isa']}) {span('int8_gops', '.0f')} GOP/s")


def agreement(a, engs):
    log(f"\n== agreement: greedy ids of {AGREE_NEW} new tokens after {AGREE_PROMPT}, vs HF fp32")
    extra = ["--ids", ",".join(map(str, AGREE_PROMPT)), "--steps", str(AGREE_NEW)]
    got = {(e, f): run_one(a, e, f, "ids", extra) for e, f in engs}
    ref = got[("hf", "fp32")].get("ids")
    if ref is None:
        log(f"  HF fp32 failed: {got[('hf', 'fp32')]['error']}")
        return got
    log(f"  HF fp32 ids: {ref}  [{got[('hf', 'fp32')].get('isa', '?')}]")
    for (e, f), r in got.items():
        if (e, f) == ("hf", "fp32"):
            continue
        exact = CLASS.get(f) == "32-bit" and "/kv" not in f
        log(f"  {e + ' ' + f:22s} {verdict(r, ref, exact)}  [{r.get('isa', '?')}]")
    log("  [...]: the instruction set each engine says it runs")
    return got


def verdict(r, ref, exact):
    if "error" in r:
        return f"FAILED: {r['error']}"
    ids = r["ids"]
    same = next((i for i, (x, y) in enumerate(zip(ids, ref)) if x != y), len(ref))
    if same == len(ref) and len(ids) == len(ref):
        return f"agrees ({len(ref)}/{len(ref)})"
    if exact:
        return f"DISAGREES after {same} of {len(ref)} tokens (expected exact), then {ids[same:]}"
    return (f"diverges after {same} of {len(ref)} tokens (rounded: near-ties expected), "
            f"then {ids[same:]}")


def klass(r):
    return CLASS.get(r.get("compute_type") or r.get("format"), "?")


def cases(a, engs):
    """Every (engine, format, measure, batch, extra args) run once per round."""
    out = []
    for e, f in engs:
        out.append((e, f, "prefill", 1, ["--prompt", str(a.prompt), "--steps", "1"]))
        for b in a.batches:
            out.append((e, f, "decode", b, ["--prompt", str(a.prompt), "--steps", str(a.steps),
                                            "--batch", str(b)]))
    return out


def rounds(a, todo):
    runs = []
    for r in range(a.rounds):
        log(f"\n== round {r + 1}/{a.rounds} ({len(todo)} runs)")
        for e, f, m, b, extra in todo:
            res = run_one(a, e, f, m, extra)
            res.update(round=r + 1, batch=b)
            runs.append(res)
            shown = (f"{res['tokens_per_s']:9.1f} tok/s" if "error" not in res
                     else f"FAILED: {res['error']}")
            log(f"  {e:8s} {f:12s} {label(m, b):12s} {shown}  (load {res.get('load1', 0):.2f})")
    return runs


def label(measure, batch):
    return "prefill" if measure == "prefill" else f"decode b={batch}"


def summarize(runs):
    """One row per (engine, format, measure, batch): median, min, max of tokens/s."""
    rows = {}
    for r in runs:
        key = (r["engine"], r["format"], r["measure"], r["batch"])
        row = rows.setdefault(key, {"engine": key[0], "format": key[1], "measure": key[2],
                                    "batch": key[3], "tps": [], "errors": [], "class": "?"})
        if "error" in r:
            row["errors"].append(r["error"])
            continue
        row["tps"].append(r["tokens_per_s"])
        row["class"] = klass(r)
        row["compute_type"] = r.get("compute_type", "")
    for row in rows.values():
        t = row["tps"]
        row.update(median=statistics.median(t) if t else None, min=min(t, default=None),
                   max=max(t, default=None))
    for row in rows.values():
        row["ratio"], row["vs"] = versus(row, rows.values())
    return list(rows.values())


def versus(row, rows):
    """servekit's median / the best peer's of the same class and measurement."""
    if row["engine"] != "servekit" or row["median"] is None:
        return None, ""
    peers = [p for p in rows if p["engine"] != "servekit" and p["class"] == row["class"]
             and (p["measure"], p["batch"]) == (row["measure"], row["batch"])
             and p["median"] is not None]
    if not peers:
        return None, ""
    best = max(peers, key=lambda p: p["median"])
    return row["median"] / best["median"], name(best)


def name(r):
    """engine format, with what CTranslate2 chose to compute in where that differs."""
    ct = r.get("compute_type")
    return f"{r['engine']} {r['format']}" + (f"->{ct}" if ct and ct != r["format"] else "")


def order(r):
    """32-bit, 16-bit, 8-bit; servekit first in each."""
    return (CLASSES.index(r["class"]) if r["class"] in CLASSES else len(CLASSES),
            r["engine"] != "servekit", r["engine"], r["format"])


def table(rows, runs, a):
    log(f"\n== tokens/s, median (min-max) of {a.rounds} round(s); {a.threads} threads each; "
        f"prompt {a.prompt}, {a.steps} decode steps; ISA: {a.isa}")
    log(f"   this machine, before and after the rounds: {a.peaks_line}")
    log("   ratio: servekit / best peer of the same precision class (> 1: servekit faster)")
    loads = [r["load1"] for r in runs if "load1" in r]
    if loads:
        log(f"   1-min load average before each run: {min(loads):.2f}-{max(loads):.2f} (above "
            f"{a.threads}: something else was running too)")
    log(f"{'engine format':30s} {'class':7s} {'measure':12s} {'tokens/s':>9s} "
        f"{'(min-max)':>17s}  ratio")
    for r in sorted(rows, key=lambda r: (r["measure"] != "prefill", r["batch"], order(r))):
        head = f"{name(r):30s} {r['class']:7s} {label(r['measure'], r['batch']):12s}"
        if r["median"] is None:
            log(f"{head} FAILED: {r['errors'][0]}")
            continue
        ratio = f"x{r['ratio']:.2f} vs {r['vs']}" if r["ratio"] else ""
        log(f"{head} {r['median']:9.1f} ({r['min']:7.1f}-{r['max']:7.1f})  {ratio}")
    log("   a->b: CTranslate2 runs model type a as compute type b on this CPU (its own choice)")


def write_csv(path, rows, fields):
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    log(f"wrote {path}")


def chart(path, rows, a):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("prefill", 1)] + [("decode", b) for b in a.batches]
    colors = {"servekit": "tab:blue", "ct2": "tab:orange", "llama": "tab:green", "hf": "tab:red"}
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 5.5), squeeze=False)
    for ax, (m, b) in zip(axes[0], panels):
        sel = [r for r in rows if (r["measure"], r["batch"]) == (m, b) and r["median"]]
        sel.sort(key=order)
        y = range(len(sel))
        ax.barh(y, [r["median"] for r in sel], color=[colors[r["engine"]] for r in sel],
                xerr=[[r["median"] - r["min"] for r in sel], [r["max"] - r["median"] for r in sel]])
        ax.set_yticks(list(y), [f"{name(r)} ({r['class']})" for r in sel],
                      fontsize=8)
        ax.invert_yaxis()
        ax.set_title(label(m, b))
        ax.set_xlabel("tokens/s (median, min-max)")
    fig.suptitle(f"GPT-2 124M, host CPU ({a.isa}), {a.threads} threads, {a.rounds} round(s), "
                 f"prompt {a.prompt}, {a.steps} decode steps\n{a.peaks_line}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    log(f"wrote {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="make_models.py's folder; results too")
    ap.add_argument("--servekit", type=Path, required=True, help="bench_peers_servekit")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="1 round, 16-token prompt, 8 steps, b=1,8")
    ap.add_argument("--llama", default="", help="empty: llama.cpp is there; else why it is not")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--isa", default="this CPU's", help="the instruction set the run is held to")
    ap.add_argument("--only", default="",
                    help="comma-separated engine:format pairs to run (e.g. servekit:f32,llama:f32);"
                         " HF fp32 always runs for the agreement check")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    a.prompt, a.steps, a.batches = (16, 8, [1, 8]) if a.smoke else (128, 128, [1, 8, 32])
    if a.smoke:
        a.rounds = 1
    if a.llama:
        log(f"llama.cpp: not available ({a.llama})")
    engs = engines(not a.llama)
    if a.only:
        want = {tuple(x.split(":", 1)) for x in a.only.split(",")}
        unknown = want - set(engs)
        if unknown:
            ap.error(f"--only: no such engine:format {sorted(unknown)}; there are {engs}")
        engs = [e for e in engs if e in want or e == ("hf", "fp32")]
    started = time.time()
    before = peaks(a, "before")
    agreement(a, engs)
    runs = rounds(a, cases(a, engs))
    after = peaks(a, "after")
    a.peaks_line = peaks_line([before, after])
    rows = summarize(runs)
    table(rows, runs, a)
    write_csv(a.out / "runs.csv", runs, ["round", "engine", "format", "compute_type", "measure",
                                         "batch", "prompt", "steps", "seconds", "tokens_per_s",
                                         "isa", "load1", "load5", "error"])
    write_csv(a.out / "summary.csv", rows, ["engine", "format", "class", "compute_type", "measure",
                                            "batch", "median", "min", "max", "ratio", "vs"])
    write_csv(a.out / "peaks.csv", [p for p in (before, after) if p],
              ["when", "threads", "read_gbs", "fma_gflops", "int8_gops", "int8_isa"])
    chart(a.out / "peers.png", rows, a)
    log(f"done in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
