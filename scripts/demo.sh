#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Demo generation. With a folder holding a Hugging Face GPT-2 checkpoint (config.json,
# model.safetensors, vocab.json, merges.txt) it generates with those weights. Without one it
# uses distilgpt2, fetched once into models/distilgpt2 by scripts/get_gpt2.sh where the network
# allows (the one download this script may make), else a seeded random GPT-2 124M, whose text
# is meaningless; it says which and why.
#   scripts/demo.sh [MODEL_DIR] [PROMPT]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${SERVEKIT_BUILD_DIR:-$root/build}"
# Every model shape: a checkpoint of any GPT-2 size runs (the test build compiles fewer).
SERVEKIT_TARGETS=servekit_cli bash "$root/scripts/build.sh" -DSERVEKIT_DIMS=all
model="${1:-}"
prompt="${2:-The quick brown fox jumped over the}"
if [ -z "$model" ]; then
  cached="$root/models/distilgpt2"
  if [ -f "$cached/.fetched" ]; then
    echo "demo: using distilgpt2 from $cached (fetched earlier)"
    model="$cached"
  elif bash "$root/scripts/get_gpt2.sh" distilgpt2 --out "$cached" >&2; then
    touch "$cached/.fetched"  # fetched whole and checked: used from now on
    echo "demo: using distilgpt2, just fetched into $cached"
    model="$cached"
  else
    echo "demo: no model folder given and distilgpt2 could not be fetched (see above):" \
      "generating with a seeded random GPT-2 124M instead; its text is meaningless"
  fi
fi
args=(generate --prompt "$prompt" --max-new-tokens 20 --greedy)
[ -n "$model" ] && args+=(--model "$model")
exec "$build/apps/servekit" "${args[@]}"
