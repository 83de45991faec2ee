#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The fuzzing campaign's ledger (fuzz/campaign.csv, written by scripts/fuzz.sh --until) as the
table docs/reliability.md keeps: per target, the executions and seconds of all its runs, the
coverage and corpus after the last, and what was found (a FAILED run's input is in
build/fuzz/crashes). A row's `runs` is the sittings it stands for (1, but for the rows that
carry an earlier ledger's totals).

    usage: tools/fuzz_ledger.py [fuzz/campaign.csv]
"""
import csv
import os
import sys

path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(__file__), "..", "fuzz", "campaign.csv")
rows = list(csv.DictReader(open(path)))
targets = {}
for r in rows:
    t = targets.setdefault(r["target"], {"n": 0, "runs": 0, "s": 0, "failed": 0, "first": r["date"]})
    t["n"] += int(r["executions"] or 0)
    t["runs"] += int(r.get("runs") or 1)
    t["s"] += int(r["seconds"] or 0)
    t["failed"] += r["finding"] == "FAILED"
    t["last"] = r
print("| target | executions | runs | seconds | coverage (`cov` / `ft`) after | corpus after "
      "| finding | dates (UTC) |")
print("|---|---|---|---|---|---|---|---|")
for name, t in sorted(targets.items(), key=lambda kv: -kv[1]["n"]):
    last = t["last"]
    found = f"{t['failed']} run(s) failed" if t["failed"] else "none"
    print(f"| `{name}` | {t['n']:,} | {t['runs']} | {t['s']:,} | {last['cov']} / {last['ft']} "
          f"| {int(last['corpus']):,} | {found} | {t['first'][:16]} - {last['date'][:16]} |")
