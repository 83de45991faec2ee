# SPDX-License-Identifier: Apache-2.0
"""JSON-schema grammar engines side by side: servekit, llguidance, XGrammar and outlines-core on
the same schemas (tests/constrain/schemas.json), the same documents (documents.json here, one
valid document per schema, compact, keys in declared order: a form every engine generates) and
GPT-2's vocabulary (data/gpt2).

Each engine, per schema: the time to compile it (the median of --reps compiles, a fresh
compiler with no cache each time where the engine has one), then, from a fresh matcher, the
time of the next token's mask at each token of the document (GPT-2's tokenization of it), the
end of text included (MaskBench's measure: every mask of one pass, cold). A schema counts as
supported by an engine when it compiles and every token of its document is in the masks.
Times are compared on the schemas every engine supports.

Run by bench/grammar/run.sh, which builds servekit's half (bench_grammar_masks) and installs
the peers from PyPI into .venv-grammar. Writes into --out: masks.csv (every mask and compile),
summary.csv, and grammar_engines.png.
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def percentile(v, p):
    """The p-th percentile by nearest rank (as bench/common.hpp)."""
    if not v:
        return 0.0
    s = sorted(v)
    return s[min(len(s) - 1, int(len(s) * p / 100))]


def hf_tokenizer(vocab_dir):
    """GPT-2's byte-level BPE from OpenAI's encoder.json + vocab.bpe, as a transformers
    tokenizer (what the peers' adapters take)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    t = Tokenizer(models.BPE.from_file(os.path.join(vocab_dir, "encoder.json"),
                                       os.path.join(vocab_dir, "vocab.bpe")))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=t, eos_token="<|endoftext|>")


def timed(f):
    t0 = time.perf_counter()
    r = f()
    return r, (time.perf_counter() - t0) * 1e6


def walk(matcher_mask, allowed, advance, tokens, eos):
    """Masks along tokens then the end of text. Returns (mask times in us, ok)."""
    us = []
    for t in list(tokens) + [eos]:
        m, dt = timed(matcher_mask)
        us.append(dt)
        if not allowed(m, t):
            return us, False
        if t != eos:
            advance(t)
    return us, True


def has_bit(words, t, width):
    """Whether token t's bit is set in a bitmask of `width`-bit words (bit t % width of word
    t // width, the layout every engine here writes)."""
    return (int(words[t // width]) >> (t % width)) & 1 == 1


class LLGuidance:
    name = "llguidance"

    def __init__(self, tok):
        import llguidance
        import llguidance.hf

        self.ll = llguidance
        self.tok = llguidance.hf.from_tokenizer(tok, n_vocab=len(tok))
        self.eos = tok.eos_token_id

    def compile(self, schema):
        g = self.ll.LLMatcher.grammar_from_json_schema(
            schema, defaults={"whitespace_flexible": False})
        m = self.ll.LLMatcher(self.tok, g)
        if m.is_error():
            raise ValueError(m.get_error())
        return m

    def run(self, schema, tokens):
        m = self.compile(schema)
        return walk(m.compute_bitmask, lambda b, t: has_bit(b, t, 8),
                    lambda t: m.consume_token(t), tokens, self.eos)


class XGrammar:
    name = "xgrammar"

    def __init__(self, tok):
        import xgrammar as xgr

        self.xgr = xgr
        self.info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok))
        self.eos = tok.eos_token_id
        self.bitmask = xgr.allocate_token_bitmask(1, self.info.vocab_size)

    def compile(self, schema):
        c = self.xgr.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)
        return c.compile_json_schema(schema, any_whitespace=False, separators=(",", ":"),
                                     strict_mode=False)

    def run(self, schema, tokens):
        m = self.xgr.GrammarMatcher(self.compile(schema))
        bm = self.bitmask

        def mask():
            m.fill_next_token_bitmask(bm)
            return bm

        return walk(mask, lambda b, t: has_bit(b[0], t, 32), lambda t: m.accept_token(t),
                    tokens, self.eos)


class OutlinesCore:
    name = "outlines-core"

    def __init__(self, tok):
        import outlines_core

        self.oc = outlines_core
        self.eos = tok.eos_token_id
        # Vocabulary: each token's text as the tokenizer's byte-level string, as outlines'
        # own adapter gives it (from_pretrained reads the Hugging Face hub, out of reach here).
        vocab = {}
        for s, i in tok.get_vocab().items():
            if i != self.eos:
                vocab.setdefault(s, []).append(i)
        self.vocab = outlines_core.Vocabulary(self.eos, vocab)
        self.n_vocab = len(tok)

    def compile(self, schema):
        regex = self.oc.json_schema.build_regex_from_schema(schema, r"")
        return self.oc.Index(regex, self.vocab)

    def run(self, schema, tokens):
        import numpy as np

        g = self.oc.Guide(self.compile(schema))
        bm = np.zeros((self.n_vocab + 31) // 32, dtype=np.int32)

        def mask():
            g.write_mask_into(bm.ctypes.data, bm.size, 4)
            return bm

        return walk(mask, lambda b, t: has_bit(b, t, 32), lambda t: g.advance(t), tokens,
                    self.eos)


def peer_rows(engine, docs, reps):
    rows = []
    for d in docs:
        print(f"\r  {engine.name}: {d['name']:<12}", end="", file=sys.stderr, flush=True)
        try:
            cs = [timed(lambda: engine.compile(d["schema_text"]))[1] for _ in range(reps)]
        except Exception as e:  # the engine refuses the schema
            print(f"\n  {engine.name}: {d['name']}: refused: {str(e).splitlines()[0][:160]}",
                  file=sys.stderr)
            rows.append([d["name"], 0, "compile", 0, 0])
            continue
        rows.append([d["name"], 0, "compile", statistics.median(cs), 1])
        try:
            us, ok = engine.run(d["schema_text"], d["tokens"])
        except Exception as e:
            print(f"\n  {engine.name}: {d['name']}: {str(e).splitlines()[0][:160]}",
                  file=sys.stderr)
            us, ok = [], False
        for i, u in enumerate(us):
            rows.append([d["name"], i, "mask", u, int(ok or i < len(us) - 1)])
        if not ok:
            print(f"\n  {engine.name}: {d['name']}: refuses the document at token {len(us) - 1}",
                  file=sys.stderr)
    print("\r" + " " * 40 + "\r", end="", file=sys.stderr)
    return rows


def servekit_rows(binary, docs, out, reps):
    path = os.path.join(out, "docs.jsonl")
    with open(path, "w") as f:
        for d in docs:
            f.write(json.dumps({"name": d["name"], "schema": d["schema"],
                                "tokens": d["tokens"]}) + "\n")
    csv_path = os.path.join(out, "servekit.csv")
    subprocess.run([binary, "--docs", path, "--out", csv_path, "--compile-reps", str(reps)],
                   check=True)
    with open(csv_path) as f:
        r = csv.reader(f)
        next(r)
        return [[n, int(i), k, float(u), int(ok)] for n, i, k, u, ok in r]


def summarize(by_engine, names):
    """Per engine: supported schemas, and times over the schemas every engine supports."""
    supported = {}
    for e, rows in by_engine.items():
        good = set()
        for n in names:
            mine = [r for r in rows if r[0] == n]
            if mine and all(r[4] == 1 for r in mine) and any(r[2] == "mask" for r in mine):
                good.add(n)
        supported[e] = good
    common = set(names)
    for g in supported.values():
        common &= g
    out = []
    for e, rows in by_engine.items():
        masks = [r[3] for r in rows if r[2] == "mask" and r[0] in common]
        comp = [r[3] for r in rows if r[2] == "compile" and r[0] in common]
        out.append({
            "engine": e, "supported": len(supported[e]), "schemas": len(names),
            "common": len(common), "masks": len(masks),
            "mask_mean_us": statistics.fmean(masks) if masks else 0,
            "mask_p50_us": percentile(masks, 50), "mask_p99_us": percentile(masks, 99),
            "mask_max_us": max(masks) if masks else 0,
            "compile_mean_us": statistics.fmean(comp) if comp else 0,
            "compile_p50_us": percentile(comp, 50), "compile_max_us": max(comp) if comp else 0,
        })
    return out, common


def plot(summary, by_engine, common, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.8))
    engines = [s["engine"] for s in summary]
    data = [[max(r[3], 0.1) for r in by_engine[e] if r[2] == "mask" and r[0] in common]
            for e in engines]
    a.boxplot(data, whis=(1, 99), showfliers=False)
    a.set_xticks(range(1, len(engines) + 1), engines)
    a.set_yscale("log")
    a.set_ylabel("mask time per token (us, log)")
    a.set_title(f"mask per token, {len(common)} schemas all support\n(box: quartiles, "
                "whiskers: p1-p99; x: mean)")
    for i, s in enumerate(summary):
        a.plot(i + 1, s["mask_mean_us"], "kx")
    b.bar(engines, [s["compile_mean_us"] / 1e3 for s in summary], color="tab:blue")
    b.set_yscale("log")
    b.set_ylabel("compile time, mean over schemas (ms, log)")
    b.set_title("schema compile time")
    for i, s in enumerate(summary):
        b.text(i, s["compile_mean_us"] / 1e3, f"{s['compile_mean_us'] / 1e3:.2f}", ha="center",
               va="bottom")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "grammar_engines.png"), dpi=100)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servekit", required=True, help="the bench_grammar_masks binary")
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "bench_grammar"))
    ap.add_argument("--reps", type=int, default=5, help="compiles per schema (median)")
    ap.add_argument("--engines", default="servekit,llguidance,xgrammar,outlines-core")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    tok = hf_tokenizer(os.path.join(ROOT, "data", "gpt2"))
    schemas = json.load(open(os.path.join(ROOT, "tests", "constrain", "schemas.json")))
    docs = []
    for d in json.load(open(os.path.join(os.path.dirname(__file__), "documents.json"))):
        s = schemas[d["schema"]]
        docs.append({"name": f"schema{d['schema']:02d}", "schema": s,
                     "schema_text": json.dumps(s), "text": d["text"],
                     "tokens": tok.encode(d["text"])})
    names = [d["name"] for d in docs]
    wanted = a.engines.split(",")
    by_engine = {}
    if "servekit" in wanted:
        by_engine["servekit"] = servekit_rows(a.servekit, docs, a.out, a.reps)
    for cls in (LLGuidance, XGrammar, OutlinesCore):
        if cls.name in wanted:
            by_engine[cls.name] = peer_rows(cls(tok), docs, a.reps)
    with open(os.path.join(a.out, "masks.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["engine", "schema", "index", "kind", "us", "ok"])
        for e, rows in by_engine.items():
            for r in rows:
                w.writerow([e] + r)
    summary, common = summarize(by_engine, names)
    with open(os.path.join(a.out, "summary.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(summary[0].keys()))
        w.writeheader()
        w.writerows(summary)
    print(f"{len(docs)} schemas, {sum(len(d['tokens']) for d in docs)} document tokens; "
          f"times over the {len(common)} schemas every engine supports")
    print(f"{'engine':<14} {'supported':>9} {'masks':>6} {'mean us':>9} {'p50 us':>8} "
          f"{'p99 us':>9} {'max us':>9} {'compile ms':>11} {'compile max':>12}")
    for s in summary:
        print(f"{s['engine']:<14} {s['supported']:>5}/{s['schemas']:<3} {s['masks']:>6} "
              f"{s['mask_mean_us']:>9.1f} {s['mask_p50_us']:>8.1f} {s['mask_p99_us']:>9.1f} "
              f"{s['mask_max_us']:>9.1f} {s['compile_mean_us'] / 1e3:>11.3f} "
              f"{s['compile_max_us'] / 1e3:>12.3f}")
    plot(summary, by_engine, common, a.out)


if __name__ == "__main__":
    main()
