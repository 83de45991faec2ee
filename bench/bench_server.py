#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Load benchmark of `servekit serve`: for each client count, that many concurrent streaming
clients send requests back to back for --duration seconds (tests/server/load.py checks every
answer). Prints requests/s, generated tokens/s, TTFT and TPOT p50/p99, lost/garbled answers,
and the server's memory (RSS) idle before, at its peak, and idle after. Beside it, the peer:
the same request mix through the engine with no HTTP (`servekit batch`), so the server's cost is
the gap between the two. Writes a CSV and a PNG (throughput against TPOT, per client count).

    $(tools/server_venv.sh | tail -1) bench/bench_server.py [--clients 1,4,16,64] [--duration 15]
        [--model DIR --vocab DIR] [--out out/bench_server]
"""
import argparse
import asyncio
import csv
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "server"))
import load  # noqa: E402
from servekit_server import FIXTURES, Server, servekit_bin  # noqa: E402


def engine_alone(model_args, n, max_batch):
    """The peer: n requests of the same mix through `servekit batch` (no HTTP); generated tok/s."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for i in range(n):
            b = load.request_body(i)
            p = b["parameters"]
            f.write(json.dumps({"prompt": b["inputs"], "max_new_tokens": p["max_new_tokens"],
                                "temperature": p["temperature"], "seed": p["seed"],
                                "ignore_eos": True}) + "\n")
    r = subprocess.run([servekit_bin(), "batch", *model_args, "--input", f.name, "--output",
                        os.devnull, "--max-batch", str(max_batch)], capture_output=True, text=True)
    os.unlink(f.name)
    m = re.search(r"([0-9.]+) generated tok/s", r.stderr)
    if r.returncode != 0 or not m:
        raise RuntimeError("servekit batch failed:\n" + r.stderr)
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", default="1,4,16,64")
    ap.add_argument("--duration", type=float, default=15)
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--model", default=str(FIXTURES / "tiny-a"))
    ap.add_argument("--vocab", default=str(FIXTURES / "tiny-vocab"))
    ap.add_argument("--out", default=str(ROOT / "out" / "bench_server"))
    a = ap.parse_args()
    model_args = ["--model", a.model, "--vocab", a.vocab]
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with Server(model_args + ["--max-batch", str(a.max_batch), "--max-pending", "256", "-q"]) as s:
        asyncio.run(load.run(s.url, clients=2, duration=1, first_id=10**6))  # warm up
        time.sleep(1)
        idle0 = s.rss_kib()
        next_id = 0
        for c in [int(x) for x in a.clients.split(",")]:
            peak = [s.rss_kib()]
            done = threading.Event()

            def watch():
                while not done.wait(0.2):
                    peak[0] = max(peak[0], s.rss_kib())

            t = threading.Thread(target=watch)
            t.start()
            print(f"bench_server: {c} clients for {a.duration:.0f} s ...", file=sys.stderr,
                  flush=True)
            rec = asyncio.run(load.run(s.url, clients=c, duration=a.duration, first_id=next_id))
            done.set()
            t.join()
            time.sleep(7)  # idle connection threads end after 5 s
            next_id += rec["sent"]
            row = {"clients": c, **load.summary(rec), "rss_idle_before_mib": idle0 / 1024,
                   "rss_peak_mib": peak[0] / 1024, "rss_idle_after_mib": s.rss_kib() / 1024}
            row["engine_alone_tok_per_s"] = engine_alone(model_args, max(rec["ok"], 1), a.max_batch)
            rows.append(row)
            print(f"  {c:3d} clients: {row['req_per_s']:7.1f} req/s {row['tok_per_s']:8.0f} tok/s "
                  f"(engine alone, same mix: {row['engine_alone_tok_per_s']:8.0f} tok/s)  "
                  f"TTFT p50 {row['ttft_p50_ms']:6.1f} p99 {row['ttft_p99_ms']:6.1f} ms  "
                  f"TPOT p50 {row['tpot_p50_ms']:5.2f} p99 {row['tpot_p99_ms']:5.2f} ms  "
                  f"ok {row['ok']} lost {row['lost']} garbled {row['garbled']} "
                  f"http errors {row['http_errors']}  RSS idle {row['rss_idle_before_mib']:.0f} -> "
                  f"peak {row['rss_peak_mib']:.0f} -> {row['rss_idle_after_mib']:.0f} MiB",
                  flush=True)
        code = s.stop()
    print(f"bench_server: server exited {code} after SIGTERM", file=sys.stderr)
    with open(out / "bench_server.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    xs = [r["tpot_p50_ms"] for r in rows]
    ax[0].plot(xs, [r["tok_per_s"] for r in rows], "o-", label="servekit serve (HTTP, streaming)")
    ax[0].plot(xs, [r["engine_alone_tok_per_s"] for r in rows], "s--",
               label="engine alone, same requests")
    for r in rows:
        ax[0].annotate(f"{r['clients']} clients", (r["tpot_p50_ms"], r["tok_per_s"]))
    ax[0].set_xlabel("TPOT p50 (ms)")
    ax[0].set_ylabel("generated tokens / s")
    ax[0].legend()
    ax[0].set_title("throughput vs latency")
    ax[1].plot([r["clients"] for r in rows], [r["ttft_p50_ms"] for r in rows], "o-", label="p50")
    ax[1].plot([r["clients"] for r in rows], [r["ttft_p99_ms"] for r in rows], "s--", label="p99")
    ax[1].set_xscale("log", base=2)
    ax[1].set_xlabel("concurrent streaming clients")
    ax[1].set_ylabel("TTFT (ms)")
    ax[1].legend()
    ax[1].set_title("time to first token")
    fig.tight_layout()
    fig.savefig(out / "bench_server.png", dpi=110)
    print(f"bench_server: wrote {out / 'bench_server.csv'} and {out / 'bench_server.png'}",
          file=sys.stderr)
    bad = sum(r["lost"] + r["garbled"] + r["http_errors"] for r in rows)
    return 1 if bad or code != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
