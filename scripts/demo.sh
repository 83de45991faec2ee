#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Demo generation. With a folder holding a Hugging Face GPT-2 checkpoint (config.json,
# model.safetensors, vocab.json, merges.txt) it generates with those weights; without one it
# uses a seeded random GPT-2 124M, whose text is meaningless.
#   scripts/demo.sh [MODEL_DIR] [PROMPT]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${SERVEKIT_BUILD_DIR:-$root/build}"
SERVEKIT_TARGETS=servekit_cli bash "$root/scripts/build.sh"
model="${1:-}"
prompt="${2:-The quick brown fox jumped over the}"
args=(generate --prompt "$prompt" --max-new-tokens 20 --greedy)
[ -n "$model" ] && args+=(--model "$model")
exec "$build/apps/servekit" "${args[@]}"
