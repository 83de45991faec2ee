#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Lesson 7's client code, run against a servekit server: the course's LoRAX snippets with only
the URL changed. 1) one request, then one stream: TTFT and tokens/s; 2) three concurrent streams
(max_new_tokens 100, 10, 10), whose tokens interleave as the engine batches them; 3) the same
prompt style under three adapters, one after another, then all three at once.
Writes the per-token times of part 2 to out/07_server/streams.{csv,png}.

    python examples/07_server/client.py http://127.0.0.1:8080
"""
import asyncio
import csv
import pathlib
import sys
import time

from lorax import AsyncClient, Client

endpoint_url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080"
out = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else "out/07_server")
out.mkdir(parents=True, exist_ok=True)
client = Client(endpoint_url)

print("== Prefill vs decode (KV cache)")
t0 = time.time()
resp = client.generate("What is deep learning?", max_new_tokens=32)
duration_s = time.time() - t0
print(repr(resp.generated_text))
print("Request duration (s):", round(duration_s, 4))

durations_s = []
t0 = time.time()
for resp in client.generate_stream("What is deep learning?", max_new_tokens=32):
    durations_s.append(time.time() - t0)
    if not resp.token.special:
        print(resp.token.text, sep="", end="", flush=True)
    t0 = time.time()
print("\nTime to first token (TTFT) (s):", round(durations_s[0], 4))
print("Throughput (tok / s):", round((len(durations_s) - 1) / sum(durations_s[1:]), 1))

print("\n== Continuous batching: three streams at once")
color_codes = ["31", "32", "34"]  # red, green, blue


def format_text(text, i):
    return f"\x1b[{color_codes[i]}m{text}\x1b[0m"


async_client = AsyncClient(endpoint_url)
streams = [[], [], []]


async def run(max_new_tokens, i):
    t0 = time.time()
    async for resp in async_client.generate_stream("What is deep learning?",
                                                   max_new_tokens=max_new_tokens):
        streams[i].append(time.time() - t0)
        print(format_text(resp.token.text, i), sep="", end="", flush=True)
        t0 = time.time()


async def three():
    await asyncio.gather(*[run(n, i) for i, n in enumerate([100, 10, 10])])

t0 = time.time()
asyncio.run(three())
print("\nTime to first token (TTFT) (s):", [round(s[0], 4) for s in streams])
print("Throughput (tok / s):", [round((len(s) - 1) / sum(s[1:]), 1) for s in streams])
print("Total duration (s):", round(time.time() - t0, 3))
with open(out / "streams.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["stream", "token", "seconds_since_previous"])
    for i, s in enumerate(streams):
        for k, d in enumerate(s):
            w.writerow([i, k, d])

print("\n== Multi-LoRA: one adapter per request")
adapters = ["predibase/hellaswag_processed", "predibase/cnn", "predibase/conllpp"]


def run_with_adapter(prompt, adapter_id):
    durations_s = []
    t0 = time.time()
    for resp in client.generate_stream(prompt, adapter_id=adapter_id, adapter_source="hub",
                                       max_new_tokens=64):
        durations_s.append(time.time() - t0)
        if not resp.token.special:
            print(resp.token.text, sep="", end="", flush=True)
        t0 = time.time()
    print(f"\n[{adapter_id}] TTFT (s): {durations_s[0]:.4f}, throughput (tok / s): "
          f"{(len(durations_s) - 1) / max(sum(durations_s[1:]), 1e-9):.1f}")


for a in adapters:
    run_with_adapter("### Passage: My friend and I think alike. We\n\n### Ending:", a)

multi = [[], [], []]


async def run_adapter(prompt, adapter_id, i):
    t0 = time.time()
    async for resp in async_client.generate_stream(prompt, adapter_id=adapter_id,
                                                   adapter_source="hub", max_new_tokens=64):
        multi[i].append(time.time() - t0)
        print(format_text(resp.token.text, i), sep="", end="", flush=True)
        t0 = time.time()


async def three_adapters():
    await asyncio.gather(*[run_adapter("Summarize: the cat sat on the mat.", a, i)
                           for i, a in enumerate(adapters)])

asyncio.run(three_adapters())
print("\nTime to first token (TTFT) (s):", [round(s[0], 4) for s in multi])

import matplotlib  # noqa: E402
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
fig, ax = plt.subplots(figsize=(8, 4))
for i, s in enumerate(streams):
    ax.plot([1e3 * d for d in s], label=f"stream {i} ({len(s)} tokens)")
ax.set_xlabel("token")
ax.set_ylabel("ms since the previous token")
ax.set_title("three concurrent streams: the first token waits for prefill, then decode steps")
ax.legend()
fig.tight_layout()
fig.savefig(out / "streams.png", dpi=110)
print(f"\nwrote {out / 'streams.csv'} and {out / 'streams.png'}")
