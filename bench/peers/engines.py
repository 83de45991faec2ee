#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One measurement of one peer engine, printed as one JSON line (bench/peers/peers.py runs this
once per run, each in its own process, as it runs bench_peers_servekit).

Engines: ct2 (CTranslate2 Generator), llama (llama.cpp through llama-cpp-python's C API, which
decodes several sequences in one batch), hf (transformers GPT2LMHeadModel, fp32).
Modes, as servekit's driver has them:
  prefill  time to the first token's logits of a --prompt-token prompt, batch 1
  decode   --steps greedy steps of --batch rows, aggregate tokens/s
  ids      the greedy ids of --steps new tokens after --ids
The generate APIs time prefill and decode together, so decode is timed as the difference of
two runs on the same prompts: (prompt + 1 + steps tokens) minus (prompt + 1 token).
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

VOCAB = 50257


def prompt_row(b, n):
    """Row b's prompt; servekit_peer.cpp's prompt_row() makes the same ids."""
    return [(1 + b * 131 + i * 7919) % VOCAB for i in range(n)]


class Ct2:
    def __init__(self, out, fmt, threads, rows, max_len):
        import ctranslate2

        # "default": the type the model was saved in, or the nearest one this CPU runs.
        self.gen = ctranslate2.Generator(str(out / f"ct2-{fmt}"), device="cpu",
                                         compute_type="default", intra_threads=threads,
                                         inter_threads=1)
        vocab = json.loads((out / "model" / "vocab.json").read_text())
        self.token = {i: s for s, i in vocab.items()}
        # CTranslate2 has no call that tells its ISA; it obeys CT2_FORCE_CPU_ISA, else picks
        # the widest the CPU has (CT2_VERBOSE=1 logs "Selected ISA").
        self.info = {"compute_type": self.gen.compute_type,
                     "isa": os.environ.get("CT2_FORCE_CPU_ISA", "widest")}

    def generate(self, prompts, new):
        res = self.gen.generate_batch([[self.token[i] for i in p] for p in prompts],
                                      max_length=new, include_prompt_in_result=False,
                                      sampling_topk=1, end_token=[])
        return [r.sequences_ids[0] for r in res]


class Hf:
    def __init__(self, out, fmt, threads, rows, max_len):
        import torch
        from transformers import GPT2LMHeadModel

        torch.set_num_threads(threads)
        self.torch = torch
        self.model = GPT2LMHeadModel.from_pretrained(out / "model", dtype=torch.float32).eval()
        self.info = {"torch": torch.__version__, "isa": torch.backends.cpu.get_cpu_capability()}

    def generate(self, prompts, new):
        ids = self.torch.tensor(prompts)
        with self.torch.inference_mode():
            # min_new_tokens: every engine decodes exactly `new` tokens, EOS or not.
            out = self.model.generate(ids, attention_mask=self.torch.ones_like(ids),
                                      max_new_tokens=new, min_new_tokens=new, do_sample=False,
                                      use_cache=True, pad_token_id=0)
        return out[:, ids.shape[1]:].tolist()

    def greedy(self, prompt, new):
        """The reference ids: argmax of the logits, KV cache, no generation-config rules (a
        min_new_tokens would mask EOS, which the other engines may pick)."""
        import inspect

        torch = self.torch
        # transformers renamed past_key_values to cache; take whichever this version has.
        params = inspect.signature(self.model.forward).parameters
        name = "cache" if "cache" in params else "past_key_values"
        ids, past, out = torch.tensor([prompt]), None, []
        with torch.inference_mode():
            for _ in range(new):
                r = self.model(ids, use_cache=True, **{name: past})
                past = getattr(r, name)
                out.append(int(r.logits[0, -1].argmax()))
                ids = torch.tensor([[out[-1]]])
        return out


class Llama:
    def __init__(self, out, fmt, threads, rows, max_len):
        import ctypes

        import llama_cpp as L
        import numpy as np

        self.L, self.np, self.ctypes = L, np, ctypes
        self._quiet = L.llama_log_callback(lambda level, text, data: None)
        L.llama_log_set(self._quiet, ctypes.c_void_p(0))
        L.llama_backend_init()
        self.model = L.llama_model_load_from_file(str(out / "gguf" / f"{fmt}.gguf").encode(),
                                                  L.llama_model_default_params())
        if not self.model:
            sys.exit(f"engines.py: llama.cpp could not load {fmt}.gguf")
        cp = L.llama_context_default_params()
        cp.n_seq_max = rows
        cp.n_ctx = rows * max_len  # split evenly between the sequences
        cp.n_batch = max(512, rows * max_len)  # a whole batched prefill in one llama_decode
        cp.n_threads = cp.n_threads_batch = threads
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            sys.exit("engines.py: llama.cpp could not make a context")
        self.batch = L.llama_batch_init(cp.n_batch, 0, rows)
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        # ggml's system info lists each x86 extension it was built with as "NAME = 1".
        built = L.llama_print_system_info().decode()
        isa = next((n for n in ("AVX512", "AVX2", "AVX") if f"{n} = 1" in built), "SSE")
        self.info = {"llama_cpp_python": L.__version__ if hasattr(L, "__version__") else "?",
                     "isa": isa}

    def _decode(self, rows):
        """rows: (seq, pos, tokens) each; returns each row's greedy next token."""
        b, n = self.batch, 0
        for seq, pos, tokens in rows:
            for i, t in enumerate(tokens):
                b.token[n], b.pos[n], b.n_seq_id[n] = t, pos + i, 1
                b.seq_id[n][0] = seq
                b.logits[n] = i == len(tokens) - 1
                n += 1
        b.n_tokens = n
        if self.L.llama_decode(self.ctx, b) != 0:
            sys.exit("engines.py: llama_decode failed")
        picks, at = [], -1
        for _, _, tokens in rows:
            at += len(tokens)
            row = self.np.ctypeslib.as_array(self.L.llama_get_logits_ith(self.ctx, at),
                                             shape=(self.n_vocab,))
            picks.append(int(row.argmax()))
        return picks

    def generate(self, prompts, new):
        self.L.llama_memory_clear(self.L.llama_get_memory(self.ctx), True)
        last = self._decode([(s, 0, p) for s, p in enumerate(prompts)])
        out = [[t] for t in last]
        for k in range(1, new):
            pos = len(prompts[0]) + k - 1
            last = self._decode([(s, pos, [t]) for s, t in enumerate(last)])
            for row, t in zip(out, last):
                row.append(t)
        return out


ENGINES = {"ct2": Ct2, "hf": Hf, "llama": Llama}


def timed(fn, *args):
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def measure(a):
    rows = 1 if a.mode in ("prefill", "ids") else a.batch
    max_len = (len(a.ids) if a.mode == "ids" else a.prompt) + a.steps + 2
    eng = ENGINES[a.engine](a.out, a.format, a.threads, rows, max_len)
    res = {"engine": a.engine, "format": a.format, "measure": a.mode, "threads": a.threads,
           **eng.info}
    if a.mode == "ids":
        greedy = getattr(eng, "greedy", None)
        res["ids"] = greedy(a.ids, a.steps) if greedy else eng.generate([a.ids], a.steps)[0]
        return res
    # Untimed warm-up at the same batch: page faults on the weights, the first allocations.
    eng.generate([prompt_row(b, 8) for b in range(rows)], 2)
    prompts = [prompt_row(b, a.prompt) for b in range(rows)]
    t_first = timed(eng.generate, prompts, 1)
    res.update(batch=rows, prompt=a.prompt)
    if a.mode == "prefill":
        return {**res, "seconds": t_first, "tokens_per_s": a.prompt / t_first}
    t_all = timed(eng.generate, prompts, 1 + a.steps)
    dt = t_all - t_first
    if dt <= 0:  # only when the machine stalled the shorter run: no figure rather than a wrong one
        sys.exit(f"engines.py: decode time not measurable ({t_all:.3f} s <= {t_first:.3f} s)")
    return {**res, "steps": a.steps, "seconds": dt, "tokens_per_s": rows * a.steps / dt}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--engine", choices=sorted(ENGINES), required=True)
    ap.add_argument("--format", required=True)
    ap.add_argument("--mode", choices=["prefill", "decode", "ids"], required=True)
    ap.add_argument("--out", type=Path, required=True, help="make_models.py's folder")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ids", type=lambda s: [int(x) for x in s.split(",")], default=[])
    print(json.dumps(measure(ap.parse_args())), flush=True)


if __name__ == "__main__":
    main()
