# SPDX-License-Identifier: Apache-2.0
"""`servekit serve` driven by the real Python clients (lorax-client, text-generation, openai)
on the tiny fixture model with its LoRA adapters, plus raw HTTP for what clients never send.
Run by ctest (test_server_clients) with the venv of tools/server_venv.sh."""
import asyncio
import json
import signal
import subprocess
import threading
import time

import openai
import pytest
import requests
from lorax import AsyncClient, Client
from lorax.errors import GenerationError, ValidationError
from prometheus_client.parser import text_string_to_metric_families
from text_generation import Client as TgiClient

from servekit_server import FIXTURES, Server, servekit_bin, tiny_args

PROMPT = "What is deep learning?"


@pytest.fixture(scope="module")
def server():
    with Server(tiny_args() + ["--max-batch", "8"]) as s:
        yield s


def metrics(url):
    out = {}
    for fam in text_string_to_metric_families(requests.get(url + "/metrics").text):
        for s in fam.samples:
            key = s.name + (json.dumps(s.labels, sort_keys=True) if s.labels else "")
            out[key] = s.value
    return out


def cli_ids(prompt, n, adapter=None):
    """What `servekit generate` (one request, no server) gives: the reference."""
    cmd = [servekit_bin(), "generate", "--model", str(FIXTURES / "tiny-a"), "--vocab",
           str(FIXTURES / "tiny-vocab"), "--json", "-n", str(n), "--ignore-eos", prompt]
    if adapter:
        cmd += ["--adapter", str(FIXTURES / "tiny-a" / "lora" / adapter)]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["generated_ids"]


def test_generate_matches_the_cli_and_reports_details(server):
    r = Client(server.url).generate(PROMPT, max_new_tokens=12, ignore_eos_token=True)
    assert r.details.finish_reason.value == "length"
    assert r.details.generated_tokens == 12
    assert [t.id for t in r.details.tokens] == cli_ids(PROMPT, 12)
    assert "".join(t.text for t in r.details.tokens) == r.generated_text
    assert r.details.prompt_tokens > 0


def test_stream_adds_up_to_the_unstreamed_answer(server):
    c = Client(server.url)
    whole = c.generate(PROMPT, max_new_tokens=16, ignore_eos_token=True)
    events = list(c.generate_stream(PROMPT, max_new_tokens=16, ignore_eos_token=True))
    assert len(events) == 16
    assert all(e.generated_text is None for e in events[:-1])
    assert events[-1].generated_text == whole.generated_text
    assert "".join(e.token.text for e in events) == whole.generated_text
    assert [e.token.id for e in events] == [t.id for t in whole.details.tokens]
    assert events[-1].details.generated_tokens == 16


@pytest.mark.parametrize("adapter", ["r4", "r8", "r16"])
def test_each_request_runs_its_own_adapter(server, adapter):
    r = Client(server.url).generate(PROMPT, adapter_id=adapter, max_new_tokens=10,
                                    ignore_eos_token=True)
    assert [t.id for t in r.details.tokens] == cli_ids(PROMPT, 10, adapter)


def test_local_adapter_source_loads_a_folder(server):
    folder = str(FIXTURES / "tiny-a" / "lora" / "r4")
    r = Client(server.url).generate(PROMPT, adapter_id=folder, adapter_source="local",
                                    max_new_tokens=6, ignore_eos_token=True)
    assert [t.id for t in r.details.tokens] == cli_ids(PROMPT, 6, "r4")


def test_three_adapters_at_once_stream_their_own_tokens(server):
    # The course's multi-LoRA snippet: three streams, three adapters, one engine.
    async def run(adapter):
        toks = []
        async for resp in AsyncClient(server.url).generate_stream(
                PROMPT, adapter_id=adapter, max_new_tokens=20, ignore_eos_token=True):
            toks.append(resp.token.id)
        return toks

    async def main():
        return await asyncio.gather(*[run(a) for a in ["r4", "r8", "r16"]])

    got = asyncio.run(main())
    for adapter, toks in zip(["r4", "r8", "r16"], got):
        assert toks == cli_ids(PROMPT, 20, adapter)


def test_three_concurrent_streams_of_the_course(server):
    # The course's continuous-batching snippet: max_new_tokens 100, 10, 10 at once.
    durations = [[], [], []]

    async def run(n, i):
        t0 = time.time()
        async for resp in AsyncClient(server.url).generate_stream(PROMPT, max_new_tokens=n,
                                                                  ignore_eos_token=True):
            durations[i].append(time.time() - t0)
            t0 = time.time()

    async def main():
        await asyncio.gather(*[run(n, i) for i, n in enumerate([100, 10, 10])])

    asyncio.run(main())
    assert [len(d) for d in durations] == [100, 10, 10]


def test_async_generate(server):
    async def main():
        c = AsyncClient(server.url)
        return await asyncio.gather(*[c.generate(PROMPT, max_new_tokens=5, ignore_eos_token=True)
                                      for _ in range(4)])

    rs = asyncio.run(main())
    assert len({r.generated_text for r in rs}) == 1  # greedy: the same for all four


def test_stop_sequences_end_the_text_before_them(server):
    c = Client(server.url)
    full = c.generate(PROMPT, max_new_tokens=24, ignore_eos_token=True).generated_text
    stop = full[len(full) // 2:len(full) // 2 + 2]
    r = c.generate(PROMPT, max_new_tokens=24, ignore_eos_token=True, stop_sequences=[stop])
    assert r.details.finish_reason.value == "stop_sequence"
    assert r.generated_text == full[:full.find(stop)]


def test_seeds_reproduce_and_are_reported(server):
    c = Client(server.url)
    a = c.generate(PROMPT, do_sample=True, temperature=0.9, seed=7, max_new_tokens=16,
                   ignore_eos_token=True)
    b = c.generate(PROMPT, do_sample=True, temperature=0.9, seed=7, max_new_tokens=16,
                   ignore_eos_token=True)
    d = c.generate(PROMPT, do_sample=True, temperature=0.9, seed=8, max_new_tokens=16,
                   ignore_eos_token=True)
    assert a.details.seed == 7
    assert [t.id for t in a.details.tokens] == [t.id for t in b.details.tokens]
    assert [t.id for t in a.details.tokens] != [t.id for t in d.details.tokens]
    # No seed: the server draws one and says which, so the answer can be reproduced.
    e = c.generate(PROMPT, do_sample=True, max_new_tokens=16, ignore_eos_token=True)
    f = c.generate(PROMPT, do_sample=True, seed=e.details.seed, max_new_tokens=16,
                   ignore_eos_token=True)
    assert e.generated_text == f.generated_text


def test_return_full_text_and_alternatives(server):
    r = Client(server.url).generate(PROMPT, max_new_tokens=4, return_full_text=True,
                                    return_k_alternatives=3, ignore_eos_token=True)
    assert r.generated_text.startswith(PROMPT)
    for t in r.details.tokens:
        assert len(t.alternative_tokens) == 3
        assert t.alternative_tokens[0].id == t.id  # greedy: the best is the one chosen


def test_text_generation_client(server):
    c = TgiClient(server.url)
    r = c.generate(PROMPT, max_new_tokens=8)
    s = "".join(e.token.text for e in c.generate_stream(PROMPT, max_new_tokens=8))
    assert s == r.generated_text


def test_openai_completions_streamed_and_not(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
    ids = [m.id for m in c.models.list().data]
    assert ids[0] == "tiny-a" and {"r4", "r8", "r16"} <= set(ids)
    whole = c.completions.create(model="r8", prompt=PROMPT, max_tokens=12, temperature=0,
                                 extra_body={"ignore_eos": True})
    assert whole.usage.completion_tokens == 12
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + 12
    assert whole.choices[0].finish_reason == "length"
    chunks = list(c.completions.create(model="r8", prompt=PROMPT, max_tokens=12, temperature=0,
                                       stream=True, extra_body={"ignore_eos": True}))
    assert "".join(ch.choices[0].text for ch in chunks) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "length"
    lp = c.completions.create(model="tiny-a", prompt=PROMPT, max_tokens=3, temperature=0,
                              logprobs=2, extra_body={"ignore_eos": True})
    assert len(lp.choices[0].logprobs.token_logprobs) == 3
    with pytest.raises(openai.NotFoundError):
        c.completions.create(model="no-such-model", prompt=PROMPT, max_tokens=3)
    with pytest.raises(openai.BadRequestError, match="`n`"):
        c.completions.create(model="tiny-a", prompt=PROMPT, max_tokens=3, n=0)


def test_n_choices_are_the_requests_seeded_seed_plus_i(server):
    """OpenAI's n: n choices, choice i the completion a request seeded seed + i gets alone
    (vLLM's rule), streamed or not; greedy, n equal ones; usage counts the prompt once."""
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="-")
    kw = dict(model="r8", prompt=PROMPT, max_tokens=10, temperature=0.9,
              extra_body={"ignore_eos": True})
    alone = [c.completions.create(seed=7 + i, logprobs=1, **kw).choices[0] for i in range(4)]
    assert len({a.text for a in alone}) > 1  # the seeds differ, so do the texts
    got = c.completions.create(seed=7, n=4, logprobs=1, **kw)
    assert [ch.index for ch in got.choices] == [0, 1, 2, 3]
    for ch, a in zip(got.choices, alone):
        assert ch.text == a.text
        assert ch.logprobs.token_logprobs == a.logprobs.token_logprobs
        assert ch.finish_reason == "length"
    one = c.completions.create(seed=7, **kw)
    assert got.usage.prompt_tokens == one.usage.prompt_tokens
    assert got.usage.completion_tokens == 40
    # Streamed: every choice's chunks, interleaved, add up to its text; each ends once.
    texts, ends, usage = ["", "", "", ""], [0, 0, 0, 0], None
    for ch in c.completions.create(seed=7, n=4, stream=True,
                                   stream_options={"include_usage": True}, **kw):
        if ch.usage:
            usage = ch.usage
        for x in ch.choices:
            texts[x.index] += x.text
            ends[x.index] += x.finish_reason is not None
    assert texts == [a.text for a in alone]
    assert ends == [1, 1, 1, 1]
    assert usage.completion_tokens == 40
    # The first choice computes the prompt; the others map its full blocks of 16 tokens.
    long = "Choices share what they can: " + " ".join(str(i) for i in range(40))
    hits = metrics(server.url)["servekit:prefix_cache_hits_total"]
    r = c.completions.create(model="tiny-a", prompt=long, max_tokens=2, temperature=1, n=3)
    p = r.usage.prompt_tokens
    assert p > 32
    assert metrics(server.url)["servekit:prefix_cache_hits_total"] - hits == 2 * 16 * ((p - 1) // 16)
    # Greedy: n equal choices, with the prompt echoed in each.
    g = c.completions.create(model="tiny-a", prompt=PROMPT, max_tokens=6, temperature=0, n=3,
                             echo=True, extra_body={"ignore_eos": True})
    assert len({ch.text for ch in g.choices}) == 1 and g.choices[2].text.startswith(PROMPT)
    with pytest.raises(openai.BadRequestError, match="`n`"):
        c.completions.create(model="tiny-a", prompt=PROMPT, max_tokens=3, n=65)


def test_prompt_logprobs_score_a_text_as_its_generation_did(server):
    """Echo with logprobs (OpenAI) and decoder_input_details (TGI): each prompt token's
    log-probability given the tokens before it, the first without one; a generated text scored
    as a prompt gets the log-probabilities its generation reported."""
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="-")
    gen = c.completions.create(model="tiny-a", prompt=PROMPT, max_tokens=4, temperature=0,
                               logprobs=0, extra_body={"ignore_eos": True})
    gen_lp = gen.choices[0].logprobs.token_logprobs
    gen_ids = cli_ids(PROMPT, 4)
    tgi = TgiClient(server.url).generate(PROMPT, max_new_tokens=1, decoder_input_details=True)
    prefill = tgi.details.prefill
    assert len(prefill) == gen.usage.prompt_tokens
    assert prefill[0].logprob is None
    assert all(t.logprob is not None and t.logprob <= 0 for t in prefill[1:])
    assert "".join(t.text for t in prefill) == PROMPT
    prompt_ids = [t.id for t in prefill]
    # The prompt and three generated tokens, scored: nothing new is generated (max_tokens 0).
    scored = c.completions.create(model="tiny-a", prompt=[prompt_ids + gen_ids[:3]], max_tokens=0,
                                  echo=True, logprobs=2, temperature=0)
    ch = scored.choices[0]
    assert ch.finish_reason == "length"
    assert scored.usage.completion_tokens == 0
    lp = ch.logprobs
    n = len(prompt_ids)
    assert len(lp.tokens) == n + 3
    assert "".join(lp.tokens) == ch.text
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert lp.token_logprobs[1:n] == [t.logprob for t in prefill[1:]]
    assert lp.token_logprobs[n:] == gen_lp[:3]
    assert all(len(t) == 2 and max(t.values()) >= v for t, v in
               zip(lp.top_logprobs[1:], lp.token_logprobs[1:]))
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(n + 3)]
    # Streamed, decoder_input_details is refused as TGI refuses it.
    r = requests.post(server.url + "/generate_stream", json={
        "inputs": PROMPT, "parameters": {"max_new_tokens": 2, "decoder_input_details": True}})
    assert r.status_code == 422, r.text
    assert "decoder_input_details" in r.json()["error"]


def test_priority_needs_the_priority_policy_and_keeps_the_tokens(server):
    """vLLM's `priority` (lower first): refused, named, by a first-come-first-served server;
    with --scheduling-policy priority, requests of mixed priorities on one slot get the tokens
    each gets alone."""
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="-")
    with pytest.raises(openai.BadRequestError, match="priority 1 asked for.*--scheduling-policy"):
        c.completions.create(model="tiny-a", prompt=PROMPT, max_tokens=2,
                             extra_body={"priority": 1})
    with pytest.raises(openai.BadRequestError, match="priority"):
        c.completions.create(model="tiny-a", prompt=PROMPT, max_tokens=2,
                             extra_body={"priority": "high"})
    assert c.completions.create(model="tiny-a", prompt=PROMPT, max_tokens=2,
                                extra_body={"priority": 0}).usage.completion_tokens == 2
    want = c.completions.create(model="tiny-a", prompt=PROMPT, max_tokens=12, temperature=0,
                                logprobs=0, extra_body={"ignore_eos": True}).choices[0].logprobs
    with Server(tiny_args() + ["--max-batch", "1", "--scheduling-policy", "priority", "-q"]) as s:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="-")
        got = {}

        def ask(p):
            r = c.completions.create(model="tiny-a", prompt=PROMPT, max_tokens=12, temperature=0,
                                     logprobs=0, extra_body={"ignore_eos": True, "priority": p})
            got[p] = r.choices[0].logprobs

        threads = [threading.Thread(target=ask, args=(p,)) for p in (3, -2, 0, 7, -5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(got) == [-5, -2, 0, 3, 7]
        for p, lp in got.items():
            assert lp.tokens == want.tokens, p
            assert lp.token_logprobs == want.token_logprobs, p


BAD = [  # (what, body, status, words in the error)
    ("malformed JSON", b'{"inputs": "x", ', 422, "not valid JSON"),
    ("not an object", b'[1, 2]', 422, "must be a JSON object"),
    ("number overflow", b'{"inputs": "x", "parameters": {"max_new_tokens": 9e999}}', 422,
     "number overflow"),
    ("no inputs", b'{"parameters": {}}', 422, "`inputs` is required"),
    ("wrong type", b'{"inputs": "x", "parameters": {"max_new_tokens": "3"}}', 422,
     "`parameters.max_new_tokens` must be an integer"),
    ("negative max tokens", b'{"inputs": "x", "parameters": {"max_new_tokens": -1}}', 422,
     "max_new_tokens"),
    ("unsupported parameter", b'{"inputs": "x", "parameters": {"repetition_penalty": 1.2}}',
     422, "repetition_penalty"),
    ("unknown parameter", b'{"inputs": "x", "parameters": {"temprature": 0.5}}', 422,
     "unknown field `parameters.temprature`"),
    ("unknown adapter", b'{"inputs": "x", "parameters": {"adapter_id": "nope"}}', 424,
     "adapter 'nope' is not known"),
    ("prompt over n_positions", json.dumps({"inputs": "a b " * 200}).encode(), 422,
     "more than n_positions = 128"),
    ("prompt + max_new_tokens over n_positions",
     json.dumps({"inputs": PROMPT, "parameters": {"max_new_tokens": 117}}).encode(), 422,
     "12 tokens + max_new_tokens 117 = 129 is more than n_positions = 128"),
    ("deeply nested", b'{"inputs": "x", "parameters": {"stop": ' + b"[" * 100000 + b"]" * 100000
     + b"}}", 422, "`parameters.stop` must be a list of strings"),
]


@pytest.mark.parametrize("what,body,status,words", BAD, ids=[b[0] for b in BAD])
def test_bad_input_gets_a_clear_4xx_and_the_server_keeps_serving(server, what, body, status, words):
    r = requests.post(server.url + "/generate", data=body,
                      headers={"Content-Type": "application/json"})
    assert r.status_code == status, r.text
    assert words in r.json()["error"]
    assert Client(server.url).generate(PROMPT, max_new_tokens=2).details.generated_tokens >= 1


def test_a_10_mb_body_is_refused(server):
    r = requests.post(server.url + "/generate", data=b'{"inputs": "' + b"a" * (10 << 20) + b'"}')
    assert r.status_code == 413
    assert Client(server.url).generate(PROMPT, max_new_tokens=2).details.generated_tokens >= 1


def test_lorax_client_raises_the_servers_errors(server):
    with pytest.raises(ValidationError, match="repetition_penalty"):
        Client(server.url).generate(PROMPT, repetition_penalty=1.5)
    with pytest.raises(GenerationError, match="not known"):
        Client(server.url).generate(PROMPT, adapter_id="predibase/nope")


def test_a_client_that_goes_away_cancels_its_request(server):
    # The tiny model makes 110 tokens in tens of milliseconds. A server can only notice a client
    # that left when a write fails, so if all 110 were written before the close arrived, the
    # request has rightly ended as "length", not "abort". Keep the engine busy with other
    # requests, which slows each step, and try again if the race was lost anyway. A server that
    # never cancels fails every attempt.
    abort = 'servekit:request_success_total{"finished_reason": "abort"}'
    busy_body = {"inputs": PROMPT, "parameters": {"max_new_tokens": 100, "ignore_eos_token": True}}
    aborted = False
    for attempt in range(5):
        before = metrics(server.url)
        busy = [threading.Thread(target=requests.post, args=(server.url + "/generate",),
                                 kwargs={"json": busy_body}) for _ in range(7)]
        for t in busy:
            t.start()
        r = requests.post(server.url + "/generate_stream", stream=True,
                          json={"inputs": PROMPT, "parameters": {"max_new_tokens": 110,
                                                                 "ignore_eos_token": True}})
        lines = r.iter_lines()
        assert next(l for l in lines if l.startswith(b"data:"))
        r.close()  # gone after one token of 110
        for t in busy:
            t.join()
        deadline = time.time() + 30
        while time.time() < deadline:  # until the stream's request has ended, either way
            m = metrics(server.url)
            if m["servekit:num_requests_running"] == 0:
                break
            time.sleep(0.05)
        m = metrics(server.url)
        if m.get(abort, 0) > before.get(abort, 0):
            aborted = True
            break
    assert aborted, "the client went away after one token of 110, in 5 attempts, never cancelled"
    assert m["servekit:num_requests_running"] == 0
    assert m["servekit:kv_cache_usage_perc"] == 0  # its blocks are back


def test_metrics_count_what_was_sent(server):
    before = metrics(server.url)
    c = Client(server.url)
    for _ in range(3):
        c.generate(PROMPT, max_new_tokens=5, ignore_eos_token=True)
    c.generate(PROMPT, max_new_tokens=5, adapter_id="r4", ignore_eos_token=True)
    requests.post(server.url + "/generate", data=b"{")
    m = metrics(server.url)
    d = lambda k: m.get(k, 0) - before.get(k, 0)
    assert d('servekit:request_success_total{"finished_reason": "length"}') == 4
    assert d("servekit:generation_tokens_total") == 20
    assert d("servekit:time_to_first_token_seconds_count") == 4
    assert d("servekit:time_per_output_token_seconds_count") == 16
    assert d('servekit:request_rejected_total{"error_type": "validation"}') == 1
    assert d('servekit:adapter_requests_total{"adapter": "r4"}') == 1
    assert m["servekit:adapter_host_hits_total"] + m["servekit:adapter_host_misses_total"] >= 1


def test_prefix_caching_reports_cached_tokens_and_changes_no_token():
    long = " ".join([PROMPT] * 4)
    args = tiny_args() + ["--kv", "paged16", "--lora", "gathered", "-q"]
    body = {"max_tokens": 8, "temperature": 0, "logprobs": 1, "extra_body": {"ignore_eos": True}}
    with Server(args) as s, Server(args + ["--no-prefix-caching"]) as off:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none")
        before = metrics(s.url)
        first = c.completions.create(model="tiny-a", prompt=long, **body)
        again = c.completions.create(model="tiny-a", prompt=long, **body)
        n = first.usage.prompt_tokens
        assert first.usage.prompt_tokens_details.cached_tokens == 0
        cached = again.usage.prompt_tokens_details.cached_tokens
        assert 0 < cached < n and cached % 16 == 0
        assert again.choices[0].text == first.choices[0].text
        assert again.choices[0].logprobs.token_logprobs == first.choices[0].logprobs.token_logprobs
        # Another adapter has K and V of its own: nothing is cached for it yet.
        r8 = c.completions.create(model="r8", prompt=long, **body)
        assert r8.usage.prompt_tokens_details.cached_tokens == 0
        # TGI / LoRAX details carry it too; the clients take the extra field in stride.
        raw = requests.post(s.url + "/generate", json={
            "inputs": long, "parameters": {"max_new_tokens": 4, "details": True}}).json()
        assert raw["details"]["cached_tokens"] == cached
        assert Client(s.url).generate(long, max_new_tokens=4, details=True).details.prompt_tokens == n
        m = metrics(s.url)
        d = lambda k: m.get(k, 0) - before.get(k, 0)
        assert d("servekit:prefix_cache_queries_total") == 5 * n
        assert d("servekit:prefix_cache_hits_total") == 3 * cached
        assert m["servekit:kv_cache_blocks_cached"] >= cached // 16 * 2
        # Off: the same tokens and logprobs, nothing cached.
        o = openai.OpenAI(base_url=off.url + "/v1", api_key="none")
        for _ in range(2):
            plain = o.completions.create(model="tiny-a", prompt=long, **body)
            assert plain.usage.prompt_tokens_details.cached_tokens == 0
            assert plain.choices[0].logprobs.token_logprobs == first.choices[0].logprobs.token_logprobs
        assert metrics(off.url)["servekit:prefix_cache_hits_total"] == 0


# n-gram prompt lookup, and a draft model (the target itself: every greedy proposal is right).
SPECULATION = {
    "ngram": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3},
    "draft": {"method": "draft_model", "model": str(FIXTURES / "tiny-a"),
              "num_speculative_tokens": 4},
}


@pytest.mark.parametrize("method", list(SPECULATION))
def test_speculation_changes_no_token_and_is_counted(method):
    # A prompt that repeats itself: prompt lookup proposes its continuation.
    loop = " ".join(["the cat sat on the mat,"] * 6)
    body = {"max_tokens": 24, "temperature": 0, "logprobs": 1, "extra_body": {"ignore_eos": True}}
    seeded = {"max_tokens": 24, "temperature": 0.7, "seed": 5, "logprobs": 1,
              "extra_body": {"ignore_eos": True}}
    args = tiny_args() + ["-q"]
    # rule "always": proposals on every run (the default rule reads the machine's step times)
    always = json.dumps(dict(SPECULATION[method], rule="always"))
    with Server(args + ["--speculative-config", always]) as s, Server(args) as off:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none")
        o = openai.OpenAI(base_url=off.url + "/v1", api_key="none")
        before = metrics(s.url)
        for b in (body, seeded):
            got = c.completions.create(model="tiny-a", prompt=loop, **b)
            want = o.completions.create(model="tiny-a", prompt=loop, **b)
            assert got.choices[0].text == want.choices[0].text
            assert got.choices[0].logprobs.token_logprobs == want.choices[0].logprobs.token_logprobs
        # The LoRAX client, streaming, with an adapter: the same tokens too.
        g = list(Client(s.url).generate_stream(loop, max_new_tokens=16, adapter_id="r8"))
        w = list(Client(off.url).generate_stream(loop, max_new_tokens=16, adapter_id="r8"))
        assert [t.token.id for t in g] == [t.token.id for t in w]
        m = metrics(s.url)
        d = lambda k: m.get(k, 0) - before.get(k, 0)
        assert d("servekit:spec_decode_num_draft_tokens_total") > 0
        assert 0 < d("servekit:spec_decode_num_accepted_tokens_total") <= \
            d("servekit:spec_decode_num_draft_tokens_total")
        assert d("servekit:spec_decode_num_drafts_total") > 0
        assert d("servekit:spec_decode_num_declined_total") == 0  # rule "always" declines none
        assert metrics(off.url).get("servekit:spec_decode_num_draft_tokens_total", 0) == 0


def test_a_full_queue_answers_429():
    # GPT-2 124M (random weights): the two admitted requests take seconds on a CPU, so they
    # are still running when the third arrives, however loaded the machine (on the tiny model
    # they could end in milliseconds, before it).
    with Server(["--seed", "1", "--max-pending", "2", "--max-batch", "2", "-q"]) as s:
        body = {"inputs": PROMPT, "parameters": {"max_new_tokens": 48, "ignore_eos_token": True}}
        held = [requests.post(s.url + "/generate_stream", json=body, stream=True) for _ in range(2)]
        r = requests.post(s.url + "/generate", json=body)
        assert r.status_code == 429
        assert r.json()["error_type"] == "overloaded"
        for h in held:  # the admitted ones still finish
            n = sum(1 for l in h.iter_lines() if l.startswith(b"data:"))
            assert n == 48
        short = {"inputs": PROMPT, "parameters": {"max_new_tokens": 2}}
        assert requests.post(s.url + "/generate", json=short).status_code == 200
        # n choices are n requests: more than the server ever admits is refused, named.
        model = requests.get(s.url + "/v1/models").json()["data"][0]["id"]
        r = requests.post(s.url + "/v1/completions",
                          json={"model": model, "prompt": PROMPT, "max_tokens": 2, "n": 3})
        assert r.status_code == 400, r.text
        assert "`n` = 3" in r.text and "--max-pending" in r.text
        r = requests.post(s.url + "/v1/completions",
                          json={"model": model, "prompt": PROMPT, "max_tokens": 2, "n": 2})
        assert r.status_code == 200, r.text
        assert [c["index"] for c in r.json()["choices"]] == [0, 1]


@pytest.mark.parametrize("grace", [30, 0])
def test_sigterm_finishes_or_cancels_what_runs_and_exits_0(grace):
    # GPT-2 124M (random weights): slow enough on a CPU that the stream is mid-way at SIGTERM.
    s = Server(["--seed", "1", "-q", "--shutdown-grace", str(grace)])
    got, first = [], threading.Event()

    def stream():
        r = requests.post(s.url + "/generate_stream", stream=True,
                          json={"inputs": PROMPT, "parameters": {"max_new_tokens": 40,
                                                                 "ignore_eos_token": True}})
        for line in r.iter_lines():
            if line.startswith(b"data:"):
                got.append(json.loads(line[5:]))
                first.set()

    t = threading.Thread(target=stream)
    t.start()
    assert first.wait(60)
    assert s.stop(signal.SIGTERM) == 0
    t.join(timeout=60)
    if grace:  # finished within the grace period, not cut
        assert len(got) == 40 and got[-1]["generated_text"] is not None
    else:  # cancelled: an error event ends the stream early
        assert len(got) < 41 and got[-1].get("error") == "the request was cancelled"


def test_sigkill_mid_stream_closes_the_client_and_a_restart_serves_on_the_same_port():
    # A server killed outright (SIGKILL: no handler runs) leaves its streaming client with a
    # closed connection, an error at once, not a hang; a new server binds the same port at once
    # (SO_REUSEADDR: the old connections' TIME_WAIT does not hold it) and serves.
    s = Server(["--seed", "1", "-q"])
    port, got, failed, first = s.port, [], [], threading.Event()

    def stream():
        try:
            r = requests.post(s.url + "/generate_stream", stream=True, timeout=60,
                              json={"inputs": PROMPT, "parameters": {"max_new_tokens": 200,
                                                                     "ignore_eos_token": True}})
            for line in r.iter_lines():
                if line.startswith(b"data:"):
                    got.append(json.loads(line[5:]))
                    first.set()
        except requests.exceptions.RequestException as e:
            failed.append(e)

    t = threading.Thread(target=stream)
    t.start()
    assert first.wait(60)
    s.proc.kill()
    s.proc.wait(timeout=10)
    t.join(timeout=10)
    assert not t.is_alive(), "the client hung on a killed server"
    assert failed, "a stream cut mid-way must end in an error, not look complete"
    assert 0 < len(got) < 200
    with Server(tiny_args() + ["-q"], port=port) as again:
        assert again.port == port
        r = requests.post(again.url + "/generate",
                          json={"inputs": "hello",
                                "parameters": {"max_new_tokens": 2, "details": True}})
        assert r.status_code == 200 and r.json()["details"]["generated_tokens"] == 2


def test_concurrent_streams_lose_nothing_and_mix_nothing():
    # A short run of the load benchmark's clients: correctness only, no timing asserted.
    import load
    with Server(tiny_args() + ["--max-batch", "16", "-q"]) as s:
        rec = asyncio.run(load.run(s.url, clients=24, duration=4))
        assert rec["ok"] >= 24
        assert (rec["lost"], rec["garbled"], rec["http_errors"]) == (0, 0, 0)
        assert rec["ok"] == rec["sent"]
        m = metrics(s.url)
        assert m['servekit:request_success_total{"finished_reason": "length"}'] == rec["ok"]
        assert m["servekit:kv_cache_usage_perc"] == 0
        assert m["servekit:num_requests_admitted"] == 0


def test_info_health_and_timing_headers(server):
    assert requests.get(server.url + "/health").status_code == 200
    info = requests.get(server.url + "/info").json()
    assert info["model_id"] == "tiny-a" and info["max_input_length"] == 128
    assert {"r4", "r8", "r16"} <= set(info["adapters"])
    r = requests.post(server.url + "/generate",
                      json={"inputs": PROMPT, "parameters": {"max_new_tokens": 7,
                                                             "ignore_eos_token": True}})
    for h in ["x-total-time", "x-queue-time", "x-inference-time", "x-time-per-token",
              "x-time-to-first-token"]:
        assert int(r.headers[h]) >= 0
    assert r.headers["x-generated-tokens"] == "7"
    assert int(r.headers["x-prompt-tokens"]) > 0
    nf = requests.get(server.url + "/nope")
    assert nf.status_code == 404 and "no route GET /nope" in nf.json()["error"]


def test_the_courses_response_format_call_returns_json_that_fits_the_schema(server):
    """The course's bonus lesson: LoRAX's response_format with a pydantic schema."""
    import jsonschema
    from pydantic import BaseModel, constr

    class Person(BaseModel):
        name: constr(max_length=10)
        age: int

    schema = Person.model_json_schema()
    c = Client(server.url)
    prompt = "Extract the person: Alice is 30 years old and lives in Paris."
    for seed in range(5):
        r = c.generate(prompt, max_new_tokens=40, do_sample=True, seed=seed,
                       response_format={"type": "json_object", "schema": schema})
        person = json.loads(r.generated_text)
        jsonschema.validate(person, schema)
        assert r.details.finish_reason.value == "eos_token"
    # OpenAI's spelling, on /v1/completions, with the openai client.
    o = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
    out = o.completions.create(
        model="tiny-a", prompt=prompt, max_tokens=40, temperature=1, seed=3,
        extra_body={"response_format": {"type": "json_schema",
                                        "json_schema": {"name": "person", "schema": schema}}})
    jsonschema.validate(json.loads(out.choices[0].text), schema)
    # No schema: any JSON object (lorax-client insists on a schema, so the raw request).
    any_obj = requests.post(server.url + "/generate", json={
        "inputs": prompt, "parameters": {"max_new_tokens": 30,
                                         "response_format": {"type": "json_object"}}})
    assert isinstance(json.loads(any_obj.json()["generated_text"]), dict)


def test_regex_and_choice_constraints_through_openai_and_tgi(server):
    """vLLM's guided_regex / guided_choice / guided_json on /v1/completions (the openai client's
    extra_body) and TGI's grammar parameter (the text-generation client): the whole text
    matches; two constraints at once (OpenAI's 400) or a bad regex (TGI's 422) is an error
    naming the fields."""
    import re
    import text_generation
    from text_generation.types import Grammar, GrammarType
    o = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
    for seed in range(3):
        out = o.completions.create(model="tiny-a", prompt="Call", max_tokens=20, temperature=1,
                                   seed=seed, extra_body={"guided_regex": r"\d{3}-\d{4}"})
        assert re.fullmatch(r"\d{3}-\d{4}", out.choices[0].text), out.choices[0].text
        pick = o.completions.create(model="tiny-a", prompt="Pick", max_tokens=8, temperature=1,
                                    seed=seed, extra_body={"guided_choice": ["left", "right"]})
        assert pick.choices[0].text in ("left", "right")
        js = o.completions.create(model="tiny-a", prompt="Obj", max_tokens=30, temperature=1,
                                  seed=seed, extra_body={"guided_json": {
                                      "type": "object", "properties": {"ok": {"type": "boolean"}},
                                      "required": ["ok"]}})
        assert isinstance(json.loads(js.choices[0].text)["ok"], bool)
        # vLLM's guided_grammar: a GBNF grammar (llama.cpp's notation), the whole text its root's.
        gr = o.completions.create(model="tiny-a", prompt="Sum", max_tokens=16, temperature=1,
                                  seed=seed, extra_body={"guided_grammar": (
                                      'root ::= num (" + " num)*\nnum ::= [1-9] [0-9]?\n')})
        assert re.fullmatch(r"[1-9][0-9]?( \+ [1-9][0-9]?)*", gr.choices[0].text), gr.choices[0].text
    bad_grammar = requests.post(server.url + "/v1/completions", json={
        "model": "tiny-a", "prompt": "x", "guided_grammar": "root ::= item"})
    assert bad_grammar.status_code == 400, bad_grammar.text
    assert "rule \"item\" is used but never defined" in bad_grammar.json()["error"]["message"]
    c = text_generation.Client(server.url)
    r = c.generate("Code:", max_new_tokens=12, do_sample=True, seed=4,
                   grammar=Grammar(type=GrammarType.Regex, value="[A-F]{2}[0-9]"))
    assert re.fullmatch("[A-F]{2}[0-9]", r.generated_text), r.generated_text
    r = c.generate("Obj:", max_new_tokens=30, do_sample=True, seed=5,
                   grammar=Grammar(type=GrammarType.Json, value={"type": "array", "items": {
                       "enum": [1, 2]}, "maxItems": 2}))
    assert set(json.loads(r.generated_text)) <= {1, 2}
    both = requests.post(server.url + "/v1/completions", json={
        "model": "tiny-a", "prompt": "x", "guided_regex": "a", "guided_choice": ["b"]})
    assert both.status_code == 400 and "give one of them" in both.json()["error"]["message"], both.text
    bad = requests.post(server.url + "/generate", json={
        "inputs": "x", "parameters": {"grammar": {"type": "regex", "value": "a(b"}}})
    assert bad.status_code == 422 and "parameters.grammar.value" in bad.json()["error"], bad.text
    assert "unterminated group" in bad.json()["error"]
    assert Client(server.url).generate(PROMPT, max_new_tokens=2).details.generated_tokens >= 1


@pytest.mark.parametrize("rf,words", [
    ({"type": "json_object", "schema": {"type": "string", "format": "hostname"}},
     "format \"hostname\" is not supported"),
    ({"type": "json_object", "schema": {"type": "object", "properties": {"a": {"type": "strng"}}}},
     "at /properties/a: unsupported type"),
    ({"type": "yaml"}, "must be json_object, json_schema or text"),
    ({"type": "json_schema"}, "`parameters.response_format.json_schema` must be an object"),
])
def test_a_schema_that_cannot_be_honoured_is_a_422_and_others_go_on(server, rf, words):
    r = requests.post(server.url + "/generate",
                      json={"inputs": PROMPT, "parameters": {"response_format": rf}})
    assert r.status_code == 422, r.text
    assert words in r.json()["error"]
    assert Client(server.url).generate(PROMPT, max_new_tokens=2).details.generated_tokens >= 1
