# SPDX-License-Identifier: Apache-2.0
"""Streaming load on `servekit serve`: `clients` concurrent clients, each sending /generate_stream
requests back to back for `duration` seconds. Every answer is checked: HTTP 200, every event
valid JSON, one final event that closes it, token texts adding up to generated_text, and the
length and seed the request asked for (so an answer meant for another request is caught).
Shared by the load benchmark (bench/bench_server.py) and the server tests."""
import asyncio
import json
import random
import statistics
import time

import aiohttp

PROMPTS = ["What is deep learning?", "The quick brown fox", "Once upon a time, in a land",
           "Serving many requests at once", "def fib(n):", "Paris is the capital of"]


def request_body(i):
    rnd = random.Random(i)
    return {"inputs": PROMPTS[i % len(PROMPTS)],
            "parameters": {"max_new_tokens": rnd.randint(16, 64), "do_sample": True,
                           "temperature": 0.8, "seed": 1000 + i, "ignore_eos_token": True,
                           "details": True}}


async def one(session, url, i, rec):
    body = request_body(i)
    want_n, want_seed = body["parameters"]["max_new_tokens"], body["parameters"]["seed"]
    t0 = time.perf_counter()
    last, gaps, ttft, texts, final = t0, [], None, [], None
    try:
        async with session.post(url + "/generate_stream", json=body) as r:
            if r.status != 200:
                rec["http_errors"] += 1
                return
            async for raw in r.content:
                line = raw.decode("utf-8").strip()
                if not line.startswith("data:"):
                    continue
                now = time.perf_counter()
                ev = json.loads(line[5:])
                if final is not None or "token" not in ev:
                    rec["garbled"] += 1
                    return
                if ttft is None:
                    ttft = now - t0
                else:
                    gaps.append(now - last)
                last = now
                texts.append(ev["token"]["text"])
                if ev["generated_text"] is not None:
                    final = ev
    except (aiohttp.ClientError, json.JSONDecodeError, UnicodeDecodeError):
        rec["lost"] += 1
        return
    if final is None:
        rec["lost"] += 1
        return
    d = final["details"]
    if ("".join(texts) != final["generated_text"] or len(texts) != want_n or
            d["generated_tokens"] != want_n or d["seed"] != want_seed):
        rec["garbled"] += 1
        return
    rec["ok"] += 1
    rec["tokens"] += want_n
    rec["ttft"].append(ttft)
    rec["tpot"].extend(gaps)


async def run(url, clients, duration, first_id=0):
    rec = {"ok": 0, "lost": 0, "garbled": 0, "http_errors": 0, "tokens": 0, "ttft": [], "tpot": []}
    next_id = [first_id]
    stop_at = time.perf_counter() + duration

    async def client(session):
        while time.perf_counter() < stop_at:
            i = next_id[0]
            next_id[0] += 1
            await one(session, url, i, rec)

    t0 = time.perf_counter()
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=600)) as s:
        await asyncio.gather(*[client(s) for _ in range(clients)])
    wall = time.perf_counter() - t0
    rec["sent"] = next_id[0] - first_id
    rec["wall_s"] = wall
    return rec


def pct(v, p):
    if not v:
        return float("nan")
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


def summary(rec):
    return {"requests": rec["sent"], "ok": rec["ok"], "lost": rec["lost"],
            "garbled": rec["garbled"], "http_errors": rec["http_errors"],
            "req_per_s": rec["ok"] / rec["wall_s"], "tok_per_s": rec["tokens"] / rec["wall_s"],
            "ttft_p50_ms": 1e3 * pct(rec["ttft"], 50), "ttft_p99_ms": 1e3 * pct(rec["ttft"], 99),
            "tpot_p50_ms": 1e3 * pct(rec["tpot"], 50), "tpot_p99_ms": 1e3 * pct(rec["tpot"], 99),
            "tpot_mean_ms": 1e3 * (statistics.mean(rec["tpot"]) if rec["tpot"] else float("nan"))}
