#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Makes the committed PEFT LoRA fixtures under tests/fixtures/<model>/lora/.

run: `$(tools/venv.sh | tail -1) tools/make_lora_reference.py`

For each tiny model already in tests/fixtures (made by make_reference.py, read back here, never
rewritten), three PEFT adapters of different ranks, scalings and target modules, saved by PEFT's
save_pretrained (adapter_config.json + adapter_model.safetensors), and for each the logits HF
transformers + PEFT computes with the adapter active (unmerged, x W + s (x A) B): prefill logits
and greedy decode steps with the KV cache, as make_reference.py does for the base model.

  r4:  r=4,  alpha=8,  c_attn only
  r8:  r=8,  alpha=32, c_attn and attn.c_proj, only layer 0 (layers_to_transform)
  r16: r=16, alpha=16, rsLoRA (scale alpha / sqrt(r)), c_attn, attn.c_proj, c_fc, mlp.c_proj

PEFT initialises lora_B to zero (an adapter that changes nothing); here A and B are random, so
every delta matters. The merged model (merge_and_unload) is checked against the unmerged logits.
CPU only, float32, deterministic. Options: --out DIR (default tests/fixtures), --only MODEL.
"""
import argparse
import json
import shutil
from pathlib import Path

import peft
import safetensors.torch
import torch
import transformers
from transformers import GPT2LMHeadModel

import make_reference as mr

ROOT = Path(__file__).resolve().parent.parent
ADAPTERS = {
    "r4": dict(seed=11, r=4, lora_alpha=8, target_modules=["c_attn"]),
    "r8": dict(seed=12, r=8, lora_alpha=32, target_modules=["c_attn", "attn.c_proj"], layers_to_transform=[0]),
    "r16": dict(
        seed=13, r=16, lora_alpha=16, use_rslora=True, target_modules=["c_attn", "attn.c_proj", "c_fc", "mlp.c_proj"]
    ),
}
A_STD, B_STD = 0.07, 0.07  # deltas of the order of the base weights (initializer_range 0.2)
CASES = ("random_len1", "random_len7", "random_len50", "course0")
MERGE_TOL = 1e-4  # merged vs unmerged logits (different summation order)


def make_adapter(base_dir, spec, out):
    base = GPT2LMHeadModel.from_pretrained(base_dir, dtype=torch.float32)
    base.eval()
    kw = {k: v for k, v in spec.items() if k != "seed"}
    cfg = peft.LoraConfig(fan_in_fan_out=True, lora_dropout=0.0, bias="none", **kw)
    model = peft.get_peft_model(base, cfg)
    g = torch.Generator().manual_seed(spec["seed"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_A." in name:
                p.copy_(A_STD * torch.randn(p.shape, generator=g))
            elif ".lora_B." in name:
                p.copy_(B_STD * torch.randn(p.shape, generator=g))
    model.eval()
    shutil.rmtree(out, ignore_errors=True)
    model.save_pretrained(out)
    (out / "README.md").unlink(missing_ok=True)  # PEFT's model-card template
    cfg_file = out / "adapter_config.json"
    saved = json.loads(cfg_file.read_text())
    saved["base_model_name_or_path"] = base_dir.name  # not this machine's path
    cfg_file.write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")
    for f in ("adapter_config.json", "adapter_model.safetensors"):
        mr.wrote(out / f)
    return model


def make_one(model_name, out_root):
    base_dir = out_root / model_name
    ref = json.loads((base_dir / "reference.json").read_text())
    cases = [c for c in ref["cases"] if c["name"] in CASES]
    assert len(cases) == len(CASES), f"{model_name}: reference.json lacks some of {CASES}"
    for name, spec in ADAPTERS.items():
        log_name = f"{model_name}/lora/{name}"
        mr.log(f"{log_name}:")
        out = base_dir / "lora" / name
        model = make_adapter(base_dir, spec, out)
        tensors, rows, worst = {}, [], [0.0]
        for i, case in enumerate(cases):
            prefill, steps, greedy = mr.run_case(model, case["prompt_ids"], worst)
            tensors[f"case{i}.prefill_logits"] = prefill.contiguous()
            tensors[f"case{i}.step_logits"] = steps.contiguous()
            margin = min(mr.top2_margin(prefill[-1:]), mr.top2_margin(steps))
            rows.append(dict(name=case["name"], prompt_ids=case["prompt_ids"], greedy_ids=greedy,
                             greedy_min_top2_margin=margin))
            mr.log(f"  {case['name']:14s} greedy {greedy}  min top-2 margin {margin:.4f}")
        mr.log(f"  max |cached - uncached| step logits: {worst[0]:.2e}")
        # The adapter must change the model, and merging it must give the same logits.
        with torch.no_grad():
            ids = torch.tensor([cases[-1]["prompt_ids"]])
            with model.disable_adapter():
                plain = model(ids, use_cache=False).logits[0]
            active = model(ids, use_cache=False).logits[0]
            merged = model.merge_and_unload()(ids, use_cache=False).logits[0]
        delta = (active - plain).abs().max().item()
        dm = (merged - active).abs().max().item()
        mr.log(f"  max |adapter - base| logits {delta:.3f}; max |merged - unmerged| {dm:.2e}")
        assert delta > 0.1, f"{log_name}: the adapter hardly changes the logits"
        assert dm <= MERGE_TOL, f"{log_name}: merged and unmerged logits differ by {dm}"
        for k, v in tensors.items():
            assert v.dtype == torch.float32 and torch.isfinite(v).all(), k
        scale = spec["lora_alpha"] / (spec["r"] ** 0.5 if spec.get("use_rslora") else spec["r"])
        meta = {
            "model": model_name,
            "adapter": name,
            "scale": scale,
            "n_steps": mr.N_STEPS,
            "cases": rows,
            "peft_version": peft.__version__,
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
        }
        safetensors.torch.save_file(tensors, str(out / "reference.safetensors"), metadata={"adapter": name})
        (out / "reference.json").write_text(json.dumps(meta, indent=1) + "\n")
        for f in ("reference.safetensors", "reference.json"):
            mr.wrote(out / f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures")
    ap.add_argument("--only", choices=sorted(mr.SPECS))
    args = ap.parse_args()
    transformers.utils.logging.disable_progress_bar()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    mr.log(f"peft {peft.__version__}, transformers {transformers.__version__}, torch {torch.__version__}")
    for name in mr.SPECS:
        if args.only in (None, name):
            make_one(name, args.out.resolve())


if __name__ == "__main__":
    main()
