#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Makes the committed Hugging Face reference fixtures under tests/fixtures/.

run: `$(tools/venv.sh | tail -1) tools/make_reference.py`

Two tiny random GPT-2 checkpoints in HF layout (config.json + model.safetensors), and for each
the logits and greedy continuations that HF transformers computes for a set of prompts:
prefill logits, per-step decode logits with HF's KV cache, and a left-padded batch decoded the
way the course's lesson 2 does it (attention mask + position_ids, extended one step at a time).

  tiny-a: 2 layers, 64 wide, 4 heads, vocab 512, 128 positions; stored float32 by
          save_pretrained (keys 'transformer.*', lm_head tied and omitted).
  tiny-b: 3 layers, 96 wide, 3 heads, vocab 1000, 96 positions; weights rounded to bfloat16 and
          stored bf16 in the older layout (no 'transformer.' prefix, explicit lm_head.weight,
          the h.N.attn.bias causal-mask buffers present). Its reference is computed in float32
          from the bf16-rounded values, so an exact bf16->fp32 loader must match to fp32 precision.

  gpt2-124m: GPT-2 small's shape (12 layers, 768 wide, 12 heads of 64, vocab 50257, 1024
          positions) with seeded random weights at HF's own init scale; 500 MB, never
          committed. The GPU check makes it on the device machine (scripts/gpu_check.sh hf),
          whose python has torch and transformers, and test_gpt2_cuda's hidden [.hf124m] case
          compares the device against it. Prompts of at most 200 tokens keep it to minutes.

CPU only, float32 compute, deterministic (fixed seeds, deterministic algorithms, one thread).
Options: --out DIR (default tests/fixtures), --only tiny-a|tiny-b|gpt2-124m (default: the two
tiny ones).
"""
import argparse
import json
import re
import shutil
import sys
from pathlib import Path

import safetensors
import safetensors.torch
import tokenizers
import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

ROOT = Path(__file__).resolve().parent.parent
GPT2_VOCAB = ROOT / "data" / "gpt2"
N_STEPS = 12  # greedy decode steps per single-prompt case
BATCH_STEPS = 10  # greedy decode steps for the left-padded batch
COURSE_PROMPTS = ["The quick brown fox jumped over the", "The rain in Spain falls", "What comes up must"]
# Noise added on top of HF's init (which zeroes biases and sets layernorms to 1): without it every
# bias/LN path is the identity and a loader that drops them would still pass.
BIAS_NOISE = 0.1
LN_NOISE = 0.1
# Cache vs no-cache agreement: |a - b| <= TOL * (1 + |b|), i.e. 1e-5 absolute near zero and
# relative for the larger logits (the two paths sum in different orders).
TOL = 1e-5
BATCH_TOL = 1e-4  # padded batch vs unpadded single prompt (different reduction lengths)

SPECS = {
    "tiny-a": dict(
        seed=1234,
        config=dict(n_layer=2, n_embd=64, n_head=4, vocab_size=512, n_positions=128),
        weights_dtype="float32",
    ),
    "tiny-b": dict(
        seed=5678,
        config=dict(n_layer=3, n_embd=96, n_head=3, vocab_size=1000, n_positions=96),
        weights_dtype="bfloat16",
    ),
    "gpt2-124m": dict(
        seed=124,
        config=dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024),
        weights_dtype="float32",
        initializer_range=0.02,  # HF's default: GPT-2's own scale, so 12 layers stay finite
        # Small biases: at 0.1, 24 biased projections swamp the embeddings and every prompt
        # gets the same logits (one greedy token for everything).
        bias_noise=0.002,
        lengths=(1, 7, 50, 200),
        on_request=True,  # not among the committed fixtures
    ),
}


def log(*args):
    print(*args, flush=True)


def wrote(path):
    path.chmod(0o644)  # save_pretrained and save_file may create 0600 files
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    log(f"  wrote {shown} ({path.stat().st_size} bytes)")


def gpt2_tokenizer():
    """OpenAI's GPT-2 BPE (encoder.json + vocab.bpe) as HF's fast tokenizer runs it."""
    vocab, merges = GPT2_VOCAB / "encoder.json", GPT2_VOCAB / "vocab.bpe"
    if not vocab.is_file() or not merges.is_file():
        sys.exit(f"make_reference.py: GPT-2 vocabulary not found at {GPT2_VOCAB}")
    tk = tokenizers.Tokenizer(tokenizers.models.BPE.from_file(str(vocab), str(merges)))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    return lambda text: tk.encode(text).ids


def make_model(spec):
    torch.manual_seed(spec["seed"])
    V = spec["config"]["vocab_size"]
    config = GPT2Config(
        **spec["config"],
        activation_function="gelu_new",
        layer_norm_epsilon=1e-5,
        initializer_range=spec.get("initializer_range", 0.2),
        bos_token_id=V - 1,
        eos_token_id=V - 1,
        # Plain softmax(QK^T / sqrt(d) + mask) V: finite even on the fully masked rows of padding.
        attn_implementation="eager",
    )
    model = GPT2LMHeadModel(config)
    assert model.config._attn_implementation == "eager"
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".ln_" in name or name.startswith("transformer.ln_f"):
                if name.endswith(".weight"):
                    p.add_(LN_NOISE * torch.randn_like(p))
                else:
                    p.copy_(LN_NOISE * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(spec.get("bias_noise", BIAS_NOISE) * torch.randn_like(p))
        if spec["weights_dtype"] == "bfloat16":
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
    model.eval()
    return model


def save_checkpoint(name, model, out):
    out.mkdir(parents=True, exist_ok=True)
    if name != "tiny-b":  # save_pretrained's layout; tiny-b is the older one, in bf16
        tmp = out / ".save_tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            model.save_pretrained(tmp, safe_serialization=True)
        except TypeError:  # newer transformers: safetensors is the only format
            model.save_pretrained(tmp)
        for f in ("config.json", "model.safetensors", "generation_config.json"):
            if (tmp / f).exists():
                shutil.move(str(tmp / f), str(out / f))
        shutil.rmtree(tmp)
    else:
        # The older HF layout, written by hand: GPT2Model keys, explicit lm_head, causal-mask
        # buffers (bool, (1, 1, P, P), lower triangular) as older HF versions registered them.
        P = model.config.n_positions
        sd = {}
        for k, v in model.state_dict().items():
            # (older transformers list the mask buffers in state_dict; they are replaced below)
            if k.startswith("transformer.") and not re.fullmatch(r".*\.attn\.(bias|masked_bias)", k):
                sd[k[len("transformer.") :]] = v.detach().to(torch.bfloat16).contiguous()
        sd["lm_head.weight"] = sd["wte.weight"].clone()
        mask = torch.tril(torch.ones(P, P, dtype=torch.bool)).view(1, 1, P, P)
        for i in range(model.config.n_layer):
            sd[f"h.{i}.attn.bias"] = mask.clone()
        safetensors.torch.save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
        model.config.dtype = torch.bfloat16  # what save_pretrained records for a bf16 model
        model.config.architectures = ["GPT2LMHeadModel"]
        model.config.save_pretrained(out)
        model.config.dtype = torch.float32
    for f in sorted(out.iterdir()):
        if f.name in ("config.json", "model.safetensors", "generation_config.json"):
            wrote(f)


def check_reload(name, model, out):
    """The written checkpoint must load back in HF to bit-identical float32 parameters."""
    back = GPT2LMHeadModel.from_pretrained(out, dtype=torch.float32)
    for (k, a), (_, b) in zip(model.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a, b), f"{name}: {k} differs after reload"
    if name == "tiny-b":
        with safetensors.safe_open(str(out / "model.safetensors"), "pt") as f:
            assert torch.equal(f.get_tensor("lm_head.weight"), f.get_tensor("wte.weight"))


def make_prompts(spec, encode):
    V = spec["config"]["vocab_size"]
    P = spec["config"]["n_positions"]
    g = torch.Generator().manual_seed(spec["seed"] + 1)
    cases = []
    for T in spec.get("lengths", (1, 2, 7, 20, 50, P - 20)):
        ids = torch.randint(0, V, (T,), generator=g).tolist()
        cases.append(dict(name=f"random_len{T}", prompt_ids=ids))
    for i, text in enumerate(COURSE_PROMPTS):
        ids = [t % V for t in encode(text)]
        cases.append(dict(name=f"course{i}", text=text, prompt_ids=ids))
    for c in cases:
        assert len(c["prompt_ids"]) + N_STEPS <= P, c["name"]
    return cases


@torch.no_grad()
def run_case(model, prompt, worst):
    ids = torch.tensor([prompt])  # (1, T)
    prefill = model(ids, use_cache=False).logits[0]  # (T, V)
    out = model(ids, use_cache=True)
    assert torch.allclose(out.logits[0], prefill, atol=TOL, rtol=TOL)
    past = out.past_key_values
    greedy = [int(prefill[-1].argmax())]
    steps = []
    for s in range(N_STEPS):
        out = model(torch.tensor([[greedy[-1]]]), past_key_values=past, use_cache=True)
        past = out.past_key_values
        steps.append(out.logits[0, -1])
        greedy.append(int(steps[-1].argmax()))
    steps = torch.stack(steps)  # (N_STEPS, V)
    # The same continuation recomputed from scratch at every step, without the cache.
    for s in range(N_STEPS):
        full = torch.tensor([prompt + greedy[: s + 1]])
        nocache = model(full, use_cache=False).logits[0, -1]
        diff = (nocache - steps[s]).abs().max().item()
        assert torch.allclose(steps[s], nocache, atol=TOL, rtol=TOL), f"step {s}: cache vs no-cache differ by {diff}"
        worst[0] = max(worst[0], diff)
        assert int(nocache.argmax()) == greedy[s + 1], f"step {s}: cache vs no-cache argmax differ"
    return prefill, steps, greedy


def top2_margin(logits):
    """Smallest gap between the best and second-best logit over the rows: how safe argmax is."""
    top = logits.topk(2, dim=-1).values
    return float((top[..., 0] - top[..., 1]).min())


@torch.no_grad()
def run_batch(model, prompts, pad_id):
    B, Tpad = len(prompts), max(len(p) for p in prompts)
    input_ids = torch.full((B, Tpad), pad_id, dtype=torch.long)
    mask = torch.zeros((B, Tpad), dtype=torch.long)
    for b, p in enumerate(prompts):
        input_ids[b, Tpad - len(p) :] = torch.tensor(p)
        mask[b, Tpad - len(p) :] = 1
    position_ids = mask.cumsum(-1) - 1
    position_ids.masked_fill_(mask == 0, 1)  # HF's convention for padded slots
    out = model(input_ids, attention_mask=mask, position_ids=position_ids, use_cache=True)
    logits = out.logits  # (B, Tpad, V)
    past = out.past_key_values
    tok = logits[:, -1].argmax(-1)  # (B,)
    greedy, steps = [tok], []
    m, pos = mask, position_ids
    for s in range(BATCH_STEPS):
        m = torch.cat([m, torch.ones((B, 1), dtype=torch.long)], dim=-1)
        pos = pos[:, -1:] + 1
        out = model(tok[:, None], attention_mask=m, position_ids=pos, past_key_values=past, use_cache=True)
        past = out.past_key_values
        steps.append(out.logits[:, -1])
        tok = steps[-1].argmax(-1)
        greedy.append(tok)
    steps = torch.stack(steps, dim=1)  # (B, BATCH_STEPS, V)
    greedy = torch.stack(greedy, dim=1)  # (B, BATCH_STEPS + 1)
    return input_ids, mask, position_ids, logits, steps, greedy


def make_one(name, spec, out_root, encode):
    log(f"{name}:")
    out = out_root / name
    model = make_model(spec)
    save_checkpoint(name, model, out)
    check_reload(name, model, out)
    V = model.config.vocab_size
    pad_id = model.config.eos_token_id

    tensors, cases, stats, worst = {}, [], [], [0.0]
    for i, case in enumerate(make_prompts(spec, encode)):
        prefill, steps, greedy = run_case(model, case["prompt_ids"], worst)
        tensors[f"case{i}.prefill_logits"] = prefill.contiguous()
        tensors[f"case{i}.step_logits"] = steps.contiguous()
        case["greedy_ids"] = greedy
        case["greedy_min_top2_margin"] = min(top2_margin(prefill[-1:]), top2_margin(steps))
        cases.append(case)
        stats.append((case["name"], float(prefill.std()), case["greedy_min_top2_margin"], greedy))

    log(f"  max |cached - uncached| step logits over all cases: {worst[0]:.2e}")
    course = [c for c in cases if c["name"].startswith("course")]
    input_ids, mask, position_ids, blogits, bsteps, bgreedy = run_batch(model, [c["prompt_ids"] for c in course], pad_id)
    batch_matches = True
    for b, c in enumerate(course):
        T, Tpad = len(c["prompt_ids"]), input_ids.shape[1]
        single = tensors[f"case{cases.index(c)}.prefill_logits"]
        dp = (blogits[b, Tpad - T :] - single).abs().max().item()
        ds = (bsteps[b] - tensors[f"case{cases.index(c)}.step_logits"][:BATCH_STEPS]).abs().max().item()
        log(f"  batch row {b}: max |batch - single| prefill {dp:.2e}, steps {ds:.2e}")
        assert dp <= BATCH_TOL and ds <= BATCH_TOL, f"{name}: batch row {b} logits differ from unpadded"
        if bgreedy[b].tolist() != c["greedy_ids"][: BATCH_STEPS + 1]:
            batch_matches = False
            log(f"  WARNING: batch row {b} greedy ids differ from the unpadded prompt's")
    assert batch_matches, f"{name}: batched greedy ids differ from unpadded greedy ids"

    tensors.update({
        "batch.input_ids": input_ids,
        "batch.attention_mask": mask,
        "batch.position_ids": position_ids,
        "batch.logits": blogits.contiguous(),
        "batch.step_logits": bsteps.contiguous(),
    })
    for k, v in tensors.items():
        assert v.dtype in (torch.float32, torch.int64), k
        assert torch.isfinite(v.double()).all(), f"{k} has non-finite values"
    ref = {
        "model": name,
        "weights_dtype": spec["weights_dtype"],
        "compute_dtype": "float32",
        "n_steps": N_STEPS,
        "cases": cases,
        "batch": {
            "prompts": [c["text"] for c in course],
            "prompt_ids": [c["prompt_ids"] for c in course],
            "pad_id": pad_id,
            "n_steps": BATCH_STEPS,
            "greedy_ids": bgreedy.tolist(),
        },
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
    }
    safetensors.torch.save_file(tensors, str(out / "reference.safetensors"), metadata={"model": name})
    with open(out / "reference.json", "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    for f in ("reference.safetensors", "reference.json"):
        wrote(out / f)
    for n, std, margin, greedy in stats:
        log(f"  {n:16s} prefill logit std {std:.3f}  min top-2 margin {margin:.4f}  greedy {greedy}")
    log(f"  batch greedy {bgreedy.tolist()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures")
    ap.add_argument("--only", choices=sorted(SPECS))
    args = ap.parse_args()
    transformers.utils.logging.disable_progress_bar()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    encode = gpt2_tokenizer()
    log(f"transformers {transformers.__version__}, torch {torch.__version__}, out {args.out}")
    for name, spec in SPECS.items():
        if args.only == name or (args.only is None and not spec.get("on_request")):
            make_one(name, spec, args.out.resolve(), encode)


if __name__ == "__main__":
    main()
