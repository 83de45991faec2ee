#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`servekit serve` under hostile load, the long form (tests/server/test_hostile_load.py is the
short one CI runs). Loopback only, every phase bounded in time. On the tiny fixture model:

  baseline      50 legitimate streaming requests, one after another, nothing else
  half-headers  the same while one client holds N connections that sent half a header and
                trickle a byte every second (so no per-read timeout ends them)
  stalled-body  the same while N connections hold a whole header and a body that never ends
  burst         the same while 10,000 connections are opened as fast as the kernel takes them
  1000-clients  1,000 concurrent streaming clients, each answer checked (tests/server/load.py:
                every token, in order, no duplicates, the length and seed asked for)

For each: the legitimate requests' time to first token (p50, p99, max) and failures, and the
server's threads and RSS before, at the end of the phase, and after it went idle. Writes a CSV
and prints a markdown table for docs/reliability.md.

    $(tools/server_venv.sh | tail -1) bench/hostile_load.py [--connections 2000]
        [--out out/hostile_load]
"""
import argparse
import asyncio
import csv
import pathlib
import resource
import socket
import sys
import threading
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "server"))
import load  # noqa: E402
from servekit_server import Server, tiny_args  # noqa: E402

HALF_HEADER = b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Ty"
STALLED_BODY = (b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100000\r\n\r\n{\"inputs\": \"")


def threads_rss(pid):
    th = rss = 0
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("Threads:"):
            th = int(line.split()[1])
        elif line.startswith("VmRSS:"):
            rss = int(line.split()[1]) // 1024
    return th, rss


def legit(url, n=50, tokens=8):
    """n streaming requests one after another: time to the first event of each, in ms."""
    ttft, failed = [], 0
    for i in range(n):
        t0 = time.perf_counter()
        try:
            with requests.post(url + "/generate_stream", stream=True, timeout=30,
                               json={"inputs": "What is deep learning?",
                                     "parameters": {"max_new_tokens": tokens,
                                                    "ignore_eos_token": True}}) as r:
                first, events = None, 0
                for line in r.iter_lines():
                    if line.startswith(b"data:"):
                        events += 1
                        first = first or time.perf_counter()
                if r.status_code != 200 or events != tokens:
                    failed += 1
                    continue
                ttft.append(1e3 * (first - t0))
        except requests.RequestException:
            failed += 1
    return ttft, failed


class Attacker:
    """Opens connections that send `first` and then (trickle) a byte a second, from a thread."""

    def __init__(self, port, n, first, trickle=True, hold=True):
        self.port, self.n, self.first, self.trickle, self.hold = port, n, first, trickle, hold
        self.socks, self.stop, self.opened, self.refused = [], threading.Event(), 0, 0
        self.t = threading.Thread(target=self.run, daemon=True)

    def run(self):
        for _ in range(self.n):
            if self.stop.is_set():
                break
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                if self.first:
                    s.sendall(self.first)
                self.opened += 1
                if self.hold:
                    self.socks.append(s)
                else:
                    s.close()
            except OSError:
                self.refused += 1
        while self.trickle and not self.stop.wait(1.0):
            for s in self.socks:
                try:
                    s.send(b"a")
                except OSError:
                    pass

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.t.join()
        for s in self.socks:
            s.close()


def pct(v, p):
    return load.pct(v, p) if v else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=2000)
    ap.add_argument("--burst", type=int, default=10000)
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--out", default=str(ROOT / "out" / "hostile_load"))
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    args = tiny_args() + ["--max-batch", "64", "--max-pending", str(a.clients + 100), "-q"]
    with Server(args) as srv:
        pid = srv.proc.pid

        def phase(name, attack, what):
            before = threads_rss(pid)
            print(f"[{name}] {what}", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            if attack is None:
                ttft, failed = legit(srv.url)
                during = threads_rss(pid)
            else:
                with attack:
                    time.sleep(2.0)  # let the attack build up
                    ttft, failed = legit(srv.url)
                    during = threads_rss(pid)
                    held = attack.opened
            time.sleep(6.0)  # idle worker threads end after 5 s
            after = threads_rss(pid)
            rows.append({"phase": name, "attack": what, "legit_ok": len(ttft),
                         "legit_failed": failed,
                         "ttft_p50_ms": pct(ttft, 50), "ttft_p99_ms": pct(ttft, 99),
                         "ttft_max_ms": max(ttft) if ttft else float("nan"),
                         "attacker_connections": held if attack else 0,
                         "threads_before": before[0], "threads_during": during[0],
                         "threads_after": after[0], "rss_before_mib": before[1],
                         "rss_during_mib": during[1], "rss_after_mib": after[1],
                         "wall_s": time.perf_counter() - t0})
            print(f"[{name}] {rows[-1]}", file=sys.stderr, flush=True)

        phase("baseline", None, "none")
        phase("half-headers", Attacker(srv.port, a.connections, HALF_HEADER),
              f"{a.connections} connections, half a header, a byte a second")
        phase("stalled-body", Attacker(srv.port, a.connections, STALLED_BODY),
              f"{a.connections} connections, a header and a body that never ends")
        phase("burst", Attacker(srv.port, a.burst, b"", trickle=False),
              f"{a.burst} connections opened at once and held")
        # 1,000 concurrent streaming clients, every answer checked.
        before = threads_rss(pid)
        print(f"[{a.clients}-clients] streaming", file=sys.stderr, flush=True)
        peak = [before]
        done = threading.Event()

        def watch():
            while not done.wait(0.2):
                peak.append(threads_rss(pid))

        w = threading.Thread(target=watch, daemon=True)
        w.start()
        t0 = time.perf_counter()
        rec = asyncio.run(load.run(srv.url, a.clients, 20))
        done.set()
        w.join()
        time.sleep(6.0)
        after = threads_rss(pid)
        s = load.summary(rec)
        rows.append({"phase": f"{a.clients}-clients", "attack": "none (the clients themselves)",
                     "legit_ok": s["ok"], "legit_failed": s["lost"] + s["garbled"] +
                     s["http_errors"], "ttft_p50_ms": s["ttft_p50_ms"],
                     "ttft_p99_ms": s["ttft_p99_ms"], "ttft_max_ms": 1e3 * max(rec["ttft"]),
                     "attacker_connections": 0, "threads_before": before[0],
                     "threads_during": max(p[0] for p in peak), "threads_after": after[0],
                     "rss_before_mib": before[1], "rss_during_mib": max(p[1] for p in peak),
                     "rss_after_mib": after[1], "wall_s": time.perf_counter() - t0})
        print(f"[{a.clients}-clients] {rows[-1]} tok/s {s['tok_per_s']:.0f}", file=sys.stderr)
        m = requests.get(srv.url + "/metrics", timeout=30).text
        dropped = [line for line in m.splitlines() if line.startswith("servekit:http_conn")]
    with open(out / "hostile_load.csv", "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0]))
        wr.writeheader()
        wr.writerows(rows)
    print("| phase | attack | legit ok / failed | TTFT p50 / p99 / max (ms) | threads before / "
          "during / after | RSS MiB before / during / after |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['phase']} | {r['attack']} | {r['legit_ok']} / {r['legit_failed']} | "
              f"{r['ttft_p50_ms']:.1f} / {r['ttft_p99_ms']:.1f} / {r['ttft_max_ms']:.1f} | "
              f"{r['threads_before']} / {r['threads_during']} / {r['threads_after']} | "
              f"{r['rss_before_mib']} / {r['rss_during_mib']} / {r['rss_after_mib']} |")
    print("\n" + "\n".join(dropped))
    print(f"\nCSV: {out / 'hostile_load.csv'}", file=sys.stderr)


if __name__ == "__main__":
    main()
