# SPDX-License-Identifier: Apache-2.0
"""`servekit serve` on the GPU machine (scripts/gpu_check.sh server), with nothing but Python's
standard library: the device machine has no network and no HTTP client packages, so the real
clients' subset (tests/server/test_server_compositions.py) is spoken here in plain HTTP.

  python3 scripts/gpu_server_check.py --bin SERVEKIT [--lib DIR] [--expected FILE]
                                      [--report FILE.md] [--backend cuda] [--load-seconds S]

1. The subset, on the tiny fixture with the composition f16 / paged16-f16 / segmented: a greedy
   /generate equals `servekit generate` on the same backend, and the host backend's greedy
   tokens recorded where the bundle was built (--expected, scripts/gpu_bundle.sh); a stream adds
   up to the unstreamed answer; two adapters at once each get their own tokens; a JSON schema is
   honoured; seeds reproduce (TGI and OpenAI routes); /info names the composition.
2. The course's client workload on a random GPT-2 124M (streaming clients back to back, every
   answer checked as tests/server/load.py checks it): TTFT, TPOT and tokens/s at 1, 8 and 32
   clients.
Exits 1 if a check fails or an answer is lost or garbled; writes a Markdown report."""
import argparse
import http.client
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "server"))
import servekit_server  # noqa: E402  (standard library only, like this script)

FIXTURES = servekit_server.FIXTURES
PROMPT = "What is deep learning?"
FLAGS = ["--weights", "f16", "--kv", "paged-f16", "--lora", "segmented"]
ADAPTERS = ["r4", "r16"]
LOAD_PROMPTS = ["What is deep learning?", "The quick brown fox", "Once upon a time, in a land",
                "Serving many requests at once", "def fib(n):", "Paris is the capital of"]


# The environment servekit runs in: LD_LIBRARY_PATH names --lib, the shared libraries carried
# with servekit-gpu (this Python keeps its own).
ENV = dict(os.environ)


def tiny_args():
    return ["--model", str(FIXTURES / "tiny-a"), "--vocab", str(FIXTURES / "tiny-vocab")]


class Server(servekit_server.Server):
    """`servekit serve` on a free loopback port (tests/server/servekit_server.py), spoken to in
    plain HTTP."""

    def __init__(self, binary, args):
        super().__init__(["-q", *args], binary=binary, env=ENV, start_s=120)
        self.host = self.url.split("//")[1].split(":")[0]

    def startup_line(self):
        return next((l.strip() for l in self.lines if "listening on" in l), "")

    def request(self, method, path, body=None):
        c = http.client.HTTPConnection(self.host, self.port, timeout=600)
        c.request(method, path, body=None if body is None else json.dumps(body),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        if r.status != 200:
            raise RuntimeError(f"{method} {path}: HTTP {r.status}: {data[:300]!r}")
        return json.loads(data) if path != "/metrics" else data.decode()

    def events(self, path, body):
        """A streamed answer's events (`data:` lines), with each one's arrival time."""
        c = http.client.HTTPConnection(self.host, self.port, timeout=600)
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            raise RuntimeError(f"POST {path}: HTTP {r.status}: {r.read()[:300]!r}")
        out = []
        for raw in r:
            line = raw.decode("utf-8").strip()
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                out.append((time.perf_counter(), json.loads(line[5:])))
        c.close()
        return out

    def generate(self, prompt, **params):
        return self.request("POST", "/generate", {"inputs": prompt, "parameters": params})


def cli_ids(binary, backend, n, adapter=None):
    """`servekit generate` (one request, no server) on the subset's composition."""
    cmd = [binary, "generate", *tiny_args(), "--json", "-n", str(n), "--ignore-eos", PROMPT,
           *FLAGS, "--backend", backend]
    if adapter:
        cmd += ["--adapter", str(FIXTURES / "tiny-a" / "lora" / adapter)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=ENV).stdout
    return json.loads(out)["generated_ids"]


def expected_answers(binary, backend):
    """What the subset compares against, from a binary that has `backend`: greedy ids of the
    prompt, base model (12 tokens) and each adapter (8 tokens). gpu_bundle.sh records them with
    the host backend."""
    out = {"backend": backend, "base": cli_ids(binary, backend, 12)}
    for a in ADAPTERS:
        out[a] = cli_ids(binary, backend, 8, a)
    return out


def ids_of(answer):
    return [t["id"] for t in answer["details"]["tokens"]]


def subset(binary, backend, expected):
    """The real clients' subset; returns [(check, passed, detail)]."""
    results = []

    def check(name, ok, detail=""):
        results.append((name, bool(ok), detail))

    s = Server(binary, tiny_args() + ["--adapter", str(FIXTURES / "tiny-a" / "lora")] + FLAGS +
               ["--backend", backend, "--max-batch", "4"])
    try:
        composition = f"f16/paged16-f16/lora-segmented/continuous/{backend}"
        line = s.startup_line()
        check("the startup line names the composition",
              f"/{backend}" in line and "f16/paged16-f16/lora-segmented" in line, line)
        info = s.request("GET", "/info")
        check("/info names the composition and a device",
              info.get("composition") == composition and info.get("device"),
              f"{info.get('composition')}, device {info.get('device')!r}")

        ids = ids_of(s.generate(PROMPT, max_new_tokens=12, ignore_eos_token=True, details=True))
        cli = cli_ids(binary, backend, 12)
        check(f"greedy /generate == servekit generate --backend {backend}", ids == cli,
              f"{ids} vs {cli}")
        if expected:
            want = expected["base"]
            check(f"greedy tokens == the {expected['backend']} backend's", ids == want,
                  f"{ids} vs {want}")

        whole = s.generate(PROMPT, max_new_tokens=10, ignore_eos_token=True, details=True)
        ev = [e for _, e in s.events("/generate_stream", {
            "inputs": PROMPT, "parameters": {"max_new_tokens": 10, "ignore_eos_token": True}})]
        check("a stream adds up to the unstreamed answer",
              [e["token"]["id"] for e in ev] == ids_of(whole) and ev and
              ev[-1]["generated_text"] == whole["generated_text"], repr(whole["generated_text"]))

        got = {}

        def stream(adapter):
            got[adapter] = [e["token"]["id"] for _, e in s.events("/generate_stream", {
                "inputs": PROMPT, "parameters": {"adapter_id": adapter, "max_new_tokens": 8,
                                                 "ignore_eos_token": True}})]

        ts = [threading.Thread(target=stream, args=(a,)) for a in ADAPTERS]
        [t.start() for t in ts]
        [t.join() for t in ts]
        for a in ADAPTERS:
            cli = cli_ids(binary, backend, 8, a)
            check(f"adapter {a}, streamed beside the other, == servekit generate",
                  got.get(a) == cli, f"{got.get(a)} vs {cli}")
            if expected:
                check(f"adapter {a}'s greedy tokens == the {expected['backend']} backend's",
                      got.get(a) == expected[a], f"{got.get(a)} vs {expected[a]}")

        schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                                   "age": {"type": "integer"}},
                  "required": ["name", "age"]}
        r = s.generate("Extract: Bob is 4.", max_new_tokens=40, do_sample=True, seed=1,
                       response_format={"type": "json_object", "schema": schema})
        try:
            v = json.loads(r["generated_text"])
            ok = (isinstance(v, dict) and set(v) == {"name", "age"} and
                  isinstance(v["name"], str) and len(v["name"]) <= 8 and
                  isinstance(v["age"], int) and not isinstance(v["age"], bool))
        except json.JSONDecodeError:
            ok = False
        check("a JSON schema is honoured", ok, repr(r["generated_text"]))

        a, b = (ids_of(s.generate(PROMPT, do_sample=True, temperature=0.9, seed=5,
                                  max_new_tokens=8, ignore_eos_token=True, details=True))
                for _ in range(2))
        x, y = (s.request("POST", "/v1/completions", {
            "model": "tiny-a", "prompt": PROMPT, "max_tokens": 8, "temperature": 1, "seed": 9})
            ["choices"][0]["text"] for _ in range(2))
        check("seeds reproduce (/generate and /v1/completions)", a == b and x == y,
              f"{a} / {x!r}")
    finally:
        s.stop()
    return results


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))] if v else float("nan")


def load(binary, backend, clients, seconds, first_id, model_args):
    """tests/server/load.py's workload and checks, on threads: `clients` streaming clients back
    to back for `seconds`."""
    s = Server(binary, model_args + ["--backend", backend, *FLAGS, "--max-batch", "64"])
    rec = {"ok": 0, "bad": 0, "tokens": 0, "ttft": [], "tpot": []}
    lock = threading.Lock()
    next_id = [first_id]
    stop_at = time.perf_counter() + seconds

    def client():
        while time.perf_counter() < stop_at:
            with lock:
                i = next_id[0]
                next_id[0] += 1
            rnd = random.Random(i)
            n = rnd.randint(16, 64)
            body = {"inputs": LOAD_PROMPTS[i % len(LOAD_PROMPTS)],
                    "parameters": {"max_new_tokens": n, "do_sample": True, "temperature": 0.8,
                                   "seed": 1000 + i, "ignore_eos_token": True, "details": True}}
            t0 = time.perf_counter()
            try:
                ev = s.events("/generate_stream", body)
            except (OSError, RuntimeError, ValueError):
                with lock:
                    rec["bad"] += 1
                continue
            texts = [e["token"]["text"] for _, e in ev]
            final = ev[-1][1] if ev else {}
            d = final.get("details") or {}
            good = (len(ev) == n and final.get("generated_text") == "".join(texts) and
                    d.get("generated_tokens") == n and d.get("seed") == 1000 + i)
            with lock:
                if not good:
                    rec["bad"] += 1
                    continue
                rec["ok"] += 1
                rec["tokens"] += n
                rec["ttft"].append(ev[0][0] - t0)
                rec["tpot"].extend(b[0] - a[0] for a, b in zip(ev, ev[1:]))

    t0 = time.perf_counter()
    ts = [threading.Thread(target=client) for _ in range(clients)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    wall = time.perf_counter() - t0
    s.stop()
    return {"clients": clients, "ok": rec["ok"], "bad": rec["bad"], "tok_s": rec["tokens"] / wall,
            "ttft_p50": 1e3 * pct(rec["ttft"], 50), "ttft_p99": 1e3 * pct(rec["ttft"], 99),
            "tpot_p50": 1e3 * pct(rec["tpot"], 50), "tpot_p99": 1e3 * pct(rec["tpot"], 99),
            "tpot_mean": 1e3 * (statistics.mean(rec["tpot"]) if rec["tpot"] else float("nan")),
            "next_id": next_id[0]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="the servekit binary (servekit-gpu on a GPU)")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--lib", help="shared libraries for the binary (LD_LIBRARY_PATH)")
    ap.add_argument("--expected", help="greedy answers of another backend (gpu_bundle.sh's)")
    ap.add_argument("--record", help="write this backend's greedy answers here and stop")
    ap.add_argument("--report", help="Markdown report (default: standard output only)")
    ap.add_argument("--load-seconds", type=float, default=15)
    ap.add_argument("--clients", default="1,8,32")
    ap.add_argument("--load-tiny", action="store_true",
                    help="the workload on the tiny fixture instead of a random GPT-2 124M")
    a = ap.parse_args()
    if a.lib:
        ENV["LD_LIBRARY_PATH"] = os.path.abspath(a.lib) + (
            ":" + ENV["LD_LIBRARY_PATH"] if ENV.get("LD_LIBRARY_PATH") else "")
    if a.record:
        pathlib.Path(a.record).write_text(json.dumps(expected_answers(a.bin, a.backend)) + "\n")
        return 0
    expected = json.loads(pathlib.Path(a.expected).read_text()) if a.expected else None
    lines = [f"## servekit serve --backend {a.backend} ({os.path.basename(a.bin)})", ""]
    failed = 0
    for name, ok, detail in subset(a.bin, a.backend, expected):
        failed += not ok
        lines.append(f"- {name}: {'passed' if ok else 'FAILED'}" + (f" ({detail})" if detail else ""))
    model_args = tiny_args() if a.load_tiny else ["--vocab", str(ROOT / "data" / "gpt2")]
    model = "the tiny fixture" if a.load_tiny else "a random GPT-2 124M"
    lines += ["", f"The course's client workload: {model} (f16 weights, paged f16 cache), "
              "streaming clients back to back, 16-64 sampled tokens a request, every answer "
              f"checked; {a.load_seconds:g} s a row.", "",
              "| clients | answers ok | lost or garbled | tokens/s | TTFT p50 ms | TTFT p99 ms "
              "| TPOT p50 ms | TPOT p99 ms |", "|---|---|---|---|---|---|---|---|"]
    first = 0
    for c in [int(x) for x in a.clients.split(",")]:
        r = load(a.bin, a.backend, c, a.load_seconds, first, model_args)
        first = r["next_id"]
        failed += r["bad"] > 0 or r["ok"] == 0
        lines.append(f"| {c} | {r['ok']} | {r['bad']} | {r['tok_s']:.0f} | {r['ttft_p50']:.1f} | "
                     f"{r['ttft_p99']:.1f} | {r['tpot_p50']:.2f} | {r['tpot_p99']:.2f} |")
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if a.report:
        pathlib.Path(a.report).write_text(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
