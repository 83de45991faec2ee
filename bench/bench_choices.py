#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""OpenAI's `n` on `servekit serve`: one prompt, n sampled choices, each a request of its own.
With prefix caching the first choice computes the prompt and the others map its blocks; the
peer, in the same run, is the same server with --no-prefix-caching, where every choice computes
the prompt. Prints, per n: the request's wall time (median of --reps), the prompt tokens the
engine computed (its prefix-cache queries less hits) and the ratio of the two servers' times.
Writes choices.csv and choices.png into --out.

    $(tools/server_venv.sh | tail -1) bench/bench_choices.py [--n 1,4,8] [--prompt-tokens 400]
        [--max-tokens 16] [--reps 3] [--out out/bench_choices]
"""
import argparse
import csv
import pathlib
import statistics
import sys
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "server"))
from servekit_server import Server  # noqa: E402


def counter(url, name):
    for line in requests.get(url + "/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def measure(url, model, n, prompt_ids, max_tokens, reps):
    """Median seconds of one n-choice request, and the prompt tokens computed per request."""
    times, computed = [], []
    for r in range(reps):
        # a prompt of its own each time: nothing cached before
        ids = [prompt_ids[0] + 100 * n + r] + prompt_ids[1:]
        q0 = counter(url, "servekit:prefix_cache_queries_total")
        h0 = counter(url, "servekit:prefix_cache_hits_total")
        t0 = time.perf_counter()
        res = requests.post(url + "/v1/completions", json={
            "model": model, "prompt": ids, "max_tokens": max_tokens, "temperature": 1,
            "seed": r, "n": n, "ignore_eos": True})
        times.append(time.perf_counter() - t0)
        res.raise_for_status()
        assert len(res.json()["choices"]) == n
        queries = counter(url, "servekit:prefix_cache_queries_total") - q0
        hits = counter(url, "servekit:prefix_cache_hits_total") - h0
        computed.append((queries or n * len(ids)) - hits)
        print(f"\r    n={n} rep {r + 1}/{reps}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return statistics.median(times), statistics.median(computed)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="1,4,8")
    ap.add_argument("--prompt-tokens", type=int, default=400)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "out" / "bench_choices"))
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    ns = [int(x) for x in a.n.split(",")]
    prompt = [(17 * i + 5) % 50000 for i in range(a.prompt_tokens)]
    base = ["--seed", "1", "-q", "--max-batch", str(max(ns))]
    rows = []
    print(f"GPT-2 124M (random weights), host; a {a.prompt_tokens}-token prompt, {a.max_tokens} "
          f"tokens a choice, median of {a.reps}")
    print(f"{'n':>3} {'shared s':>9} {'computed':>9} {'unshared s':>11} {'computed':>9} "
          f"{'unshared / shared':>18}")
    with Server(base) as s, Server(base + ["--no-prefix-caching"]) as u:
        model = requests.get(s.url + "/v1/models").json()["data"][0]["id"]
        for n in ns:
            ts, cs = measure(s.url, model, n, prompt, a.max_tokens, a.reps)
            tu, cu = measure(u.url, model, n, prompt, a.max_tokens, a.reps)
            rows.append((n, ts, cs, tu, cu))
            print(f"{n:>3} {ts:>9.2f} {cs:>9.0f} {tu:>11.2f} {cu:>9.0f} {tu / ts:>17.2f}x",
                  flush=True)
    with open(out / "choices.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["n", "shared_s", "shared_prompt_tokens_computed", "unshared_s",
                    "unshared_prompt_tokens_computed"])
        w.writerows(rows)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r[1] for r in rows], 0.4, label="prefix caching: shared")
    ax.bar([i + 0.2 for i in x], [r[3] for r in rows], 0.4, label="--no-prefix-caching")
    ax.set_xticks(list(x), [f"n={r[0]}" for r in rows])
    ax.set_ylabel("seconds per request")
    ax.set_title(f"n choices of one {a.prompt_tokens}-token prompt (GPT-2 124M, host)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "choices.png", dpi=100)
    print(f"CSV and PNG in {out}")


if __name__ == "__main__":
    main()
