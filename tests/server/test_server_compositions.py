# SPDX-License-Identifier: Apache-2.0
"""`servekit serve` on a composition chosen from the command line: f16 weights, a paged f16
cache, segmented LoRA, on the Emulated backend (the CUDA kernels run on the CPU), driven by the
real clients. Its answers are those of `servekit generate` on the same composition, and greedy
tokens those of the host backend; /info, /v1/models and /metrics say what it runs. On a GPU
machine, SERVEKIT_SERVE_BACKEND=cuda runs the same tests on the device (scripts/gpu_check.sh)."""
import asyncio
import json
import os
import subprocess
import threading
import time

import jsonschema
import openai
import pytest
import requests
from lorax import AsyncClient, Client
from prometheus_client.parser import text_string_to_metric_families

from servekit_server import FIXTURES, Server, servekit_bin, tiny_args

PROMPT = "What is deep learning?"
BACKEND = os.environ.get("SERVEKIT_SERVE_BACKEND", "emulated")
FLAGS = ["--weights", "f16", "--kv", "paged-f16", "--lora", "segmented"]
COMPOSITION = f"f16/paged16-f16/lora-segmented/continuous/{BACKEND}"


@pytest.fixture(scope="module")
def server():
    with Server(tiny_args() + FLAGS + ["--backend", BACKEND, "--max-batch", "4"]) as s:
        yield s


def cli_ids(prompt, n, backend, adapter=None):
    """`servekit generate` (one request, no server) on the same composition."""
    cmd = [servekit_bin(), "generate", "--model", str(FIXTURES / "tiny-a"), "--vocab",
           str(FIXTURES / "tiny-vocab"), "--json", "-n", str(n), "--ignore-eos", prompt,
           *FLAGS, "--backend", backend]
    if adapter:
        cmd += ["--adapter", str(FIXTURES / "tiny-a" / "lora" / adapter)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["generated_ids"]


def test_startup_line_names_the_composition(server):
    line = next(l for l in server.lines if "listening on" in l)
    assert f"/{BACKEND}" in line and "f16/paged16-f16/lora-segmented" in line


def test_generate_matches_the_cli_and_the_host_backend(server):
    r = Client(server.url).generate(PROMPT, max_new_tokens=12, ignore_eos_token=True)
    ids = [t.id for t in r.details.tokens]
    assert ids == cli_ids(PROMPT, 12, BACKEND)
    assert ids == cli_ids(PROMPT, 12, "host")  # greedy tokens: the same on either backend


def test_stream_adds_up_to_the_unstreamed_answer(server):
    c = Client(server.url)
    whole = c.generate(PROMPT, max_new_tokens=10, ignore_eos_token=True)
    events = list(c.generate_stream(PROMPT, max_new_tokens=10, ignore_eos_token=True))
    assert [e.token.id for e in events] == [t.id for t in whole.details.tokens]
    assert events[-1].generated_text == whole.generated_text


def test_two_adapters_at_once_run_their_own(server):
    async def run(adapter):
        toks = []
        async for resp in AsyncClient(server.url).generate_stream(
                PROMPT, adapter_id=adapter, max_new_tokens=8, ignore_eos_token=True):
            toks.append(resp.token.id)
        return toks

    async def main():
        return await asyncio.gather(run("r4"), run("r16"))

    for adapter, toks in zip(["r4", "r16"], asyncio.run(main())):
        assert toks == cli_ids(PROMPT, 8, BACKEND, adapter)


def test_a_json_schema_is_honoured(server):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"]}
    r = Client(server.url).generate("Extract: Bob is 4.", max_new_tokens=40, do_sample=True,
                                    seed=1, response_format={"type": "json_object",
                                                             "schema": schema})
    jsonschema.validate(json.loads(r.generated_text), schema)


def test_seeds_reproduce(server):
    c = Client(server.url)
    a, b = (c.generate(PROMPT, do_sample=True, temperature=0.9, seed=5, max_new_tokens=8,
                       ignore_eos_token=True) for _ in range(2))
    assert [t.id for t in a.details.tokens] == [t.id for t in b.details.tokens]
    o = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
    x, y = (o.completions.create(model="tiny-a", prompt=PROMPT, max_tokens=8, temperature=1,
                                 seed=9) for _ in range(2))
    assert x.choices[0].text == y.choices[0].text


def test_info_models_and_metrics_say_what_runs(server):
    info = requests.get(server.url + "/info").json()
    assert info["composition"] == COMPOSITION
    assert info["backend"] == BACKEND and info["model_dtype"] == "float16"
    assert info["kv_cache"] == {"layout": "paged16-f16", "dtype": "f16", "block_size": 16}
    assert info["lora"]["dispatch"] == "lora-segmented" and info["lora"]["max_lora_rank"] == 256
    assert info["device"]  # the CPU (and ISA) or the GPU's name
    models = requests.get(server.url + "/v1/models").json()["data"]
    assert models[0]["servekit"]["composition"] == COMPOSITION

    # lora_requests_info names a running adapter while its stream is under way: /metrics is
    # read over and over while a long stream runs, until a page names it.
    done = threading.Event()

    def stream():
        try:
            for _ in Client(server.url).generate_stream(PROMPT, adapter_id="r8",
                                                        max_new_tokens=100,
                                                        ignore_eos_token=True):
                pass
        finally:
            done.set()  # a failed stream ends the polling too

    t = threading.Thread(target=stream)
    t.start()
    page, seen = "", False
    while not done.is_set() and not seen:
        page = requests.get(server.url + "/metrics").text
        seen = 'running_lora_adapters="r8"' in page
    t.join()
    assert seen
    fams = {f.name: f for f in text_string_to_metric_families(page)}
    comp = fams["servekit:composition_info"].samples[0]
    assert comp.labels["composition"] == COMPOSITION and comp.labels["block_size"] == "16"
    lora = fams["servekit:lora_requests_info"].samples[0]
    assert lora.labels["running_lora_adapters"] == "r8"
    assert lora.labels["max_lora"] == "4"  # every row of a batch of 4 may carry its own
    assert abs(lora.value - time.time()) < 3600


def test_the_gpu_server_check_passes_on_the_emulator(tmp_path):
    """scripts/gpu_server_check.py, which `gpu_check.sh server` runs on a GPU with --backend cuda
    and the standard library alone, here on the emulated backend against the host backend's
    greedy answers, recorded as gpu_bundle.sh records them; the workload on the tiny fixture."""
    script = str(FIXTURES.parents[1] / "scripts" / "gpu_server_check.py")
    expected, report = tmp_path / "expected.json", tmp_path / "report.md"
    subprocess.run(["python3", script, "--bin", servekit_bin(), "--backend", "host", "--record",
                    str(expected)], check=True, timeout=300)
    r = subprocess.run(["python3", script, "--bin", servekit_bin(), "--backend", "emulated",
                        "--expected", str(expected), "--report", str(report), "--load-tiny",
                        "--load-seconds", "2", "--clients", "1,4"], capture_output=True,
                       text=True, timeout=600)
    text = report.read_text() if report.exists() else r.stdout + r.stderr
    assert r.returncode == 0, text
    assert "FAILED" not in text and text.count(": passed") >= 9, text
    rows = [l for l in text.splitlines() if l.startswith("| 1 |") or l.startswith("| 4 |")]
    assert len(rows) == 2 and all(int(l.split("|")[3]) == 0 for l in rows), text

