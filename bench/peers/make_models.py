#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Makes the one checkpoint every engine of bench/peers reads, in each engine's format.

  OUT/model            seeded random GPT-2 124M (GPT2Config defaults), HF layout, safetensors,
                       with the GPT-2 vocabulary servekit ships (CTranslate2 needs string tokens)
  OUT/ct2-<quant>      CTranslate2 conversions: float32, int8, int8_float32, bfloat16
  OUT/gguf/<type>.gguf llama.cpp conversions (f32, f16, q8_0), only with --gguf-convert SCRIPT:
                       the convert_hf_to_gguf.py vendored in the llama-cpp-python sdist

Every conversion starts from the same safetensors file, so a disagreement between engines is
the engines' and not the weights'. Whatever exists already is kept (delete OUT to remake it).
"""
import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEED = 1
CT2_QUANTS = ["float32", "int8", "int8_float32", "bfloat16"]
GGUF_TYPES = ["f32", "f16", "q8_0"]


def log(*args):
    print("make_models:", *args, flush=True)


def make_hf(model_dir):
    if (model_dir / "model.safetensors").exists():
        return
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(GPT2Config()).eval()
    model.save_pretrained(model_dir, safe_serialization=True)
    # HF's GPT-2 tokenizer files are OpenAI's under other names.
    shutil.copyfile(ROOT / "data/gpt2/encoder.json", model_dir / "vocab.json")
    shutil.copyfile(ROOT / "data/gpt2/vocab.bpe", model_dir / "merges.txt")
    log(f"wrote {model_dir} (random GPT-2 124M, torch.manual_seed({SEED}))")


def add_n_ctx(model_dir):
    """OpenAI's GPT-2 configs carry n_ctx, which llama.cpp's converter reads; transformers 5 no
    longer writes it. Same value as n_positions, so every other reader is unaffected."""
    path = model_dir / "config.json"
    config = json.loads(path.read_text())
    if "n_ctx" not in config:
        config["n_ctx"] = config["n_positions"]
        path.write_text(json.dumps(config, indent=2) + "\n")


def make_ct2(model_dir, out):
    import ctranslate2.converters

    for quant in CT2_QUANTS:
        dst = out / f"ct2-{quant}"
        if (dst / "model.bin").exists():
            continue
        ctranslate2.converters.TransformersConverter(str(model_dir)).convert(
            str(dst), quantization=quant, force=True)
        log(f"wrote {dst}")


def make_gguf(model_dir, out, script):
    dst_dir = out / "gguf"
    dst_dir.mkdir(exist_ok=True)
    for outtype in GGUF_TYPES:
        dst = dst_dir / f"{outtype}.gguf"
        if dst.exists():
            continue
        cmd = [sys.executable, str(script), str(model_dir), "--outtype", outtype, "--outfile", str(dst)]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            sys.stderr.write(run.stdout[-3000:] + run.stderr[-3000:])
            sys.exit(f"make_models: convert_hf_to_gguf.py --outtype {outtype} failed")
        log(f"wrote {dst}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--gguf-convert", type=Path, help="llama.cpp's convert_hf_to_gguf.py")
    a = ap.parse_args()
    model_dir = a.out / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    make_hf(model_dir)
    add_n_ctx(model_dir)
    make_ct2(model_dir, a.out)
    if a.gguf_convert:
        make_gguf(model_dir, a.out, a.gguf_convert)


if __name__ == "__main__":
    main()
