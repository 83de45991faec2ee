#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes tests/fixtures/tiny-vocab/: a 512-token byte-level BPE vocabulary for the tiny models
(vocab 512), so that any text tokenizes to ids the tiny models have. The ids are GPT-2's
scheme cut short: the 256 byte symbols in GPT-2's order, then the first 255 of GPT-2's merges
whose parts are already in the vocabulary, then <|endoftext|> = 511 (the tiny models' EOS).

Needs only the standard library and GPT-2's vocab.bpe (data/gpt2 by default):
    python3 tools/make_tiny_vocab.py [--bpe PATH] [--out DIR]
"""
import argparse
import json
import pathlib


def bytes_to_unicode():
    # GPT-2's printable stand-ins for the 256 bytes, in its order.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bpe", default=root / "data/gpt2/vocab.bpe")
    ap.add_argument("--out", default=root / "tests/fixtures/tiny-vocab")
    a = ap.parse_args()
    vocab = {s: i for i, s in enumerate(bytes_to_unicode())}
    merges = []
    for line in pathlib.Path(a.bpe).read_text(encoding="utf-8").splitlines():
        if line.startswith("#version") or not line.strip():
            continue
        x, y = line.split(" ")
        if x in vocab and y in vocab and x + y not in vocab:
            merges.append(line)
            vocab[x + y] = len(vocab)
            if len(vocab) == 511:
                break
    vocab["<|endoftext|>"] = 511
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (out / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    print(f"wrote {out}/vocab.json ({len(vocab)} tokens) and merges.txt ({len(merges)} merges)")


if __name__ == "__main__":
    main()
