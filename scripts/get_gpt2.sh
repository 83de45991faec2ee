#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fetches a GPT-2 checkpoint in the Hugging Face layout (config.json, model.safetensors,
# vocab.json, merges.txt) and checks it by generating a few tokens with it.
#   scripts/get_gpt2.sh [gpt2|gpt2-medium|gpt2-large|gpt2-xl|distilgpt2] [--out DIR]
#   scripts/get_gpt2.sh --check DIR        (check a folder you copied here yourself)
# Downloads with `hf download` or `huggingface-cli download` when one is installed, else plain
# HTTPS from $HF_ENDPOINT (default https://huggingface.co). Without a network it says so and
# how to bring the folder from elsewhere; offline, `servekit generate` without --model (or
# Gpt2<Cfg>::random(seed) in C++) runs a seeded random model of the same shape.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${SERVEKIT_BUILD_DIR:-$root/build}"
endpoint="${HF_ENDPOINT:-https://huggingface.co}"
files=(config.json model.safetensors vocab.json merges.txt)

check() {  # generate a few tokens with the folder: the shape, the tensors and the tokenizer
  local dir="$1"
  [ -x "$build/apps/servekit" ] || SERVEKIT_TARGETS=servekit_cli bash "$root/scripts/build.sh"
  echo "get_gpt2.sh: checking $dir"
  if [ -f "$dir/vocab.json" ] || [ -f "$dir/encoder.json" ]; then
    "$build/apps/servekit" generate --model "$dir" -n 12 "Hello, my name is"
  else  # no tokenizer in the folder: ids, so that a small test vocabulary still fits
    echo "get_gpt2.sh: $dir has no vocab.json: checking with token ids"
    "$build/apps/servekit" generate --model "$dir" --prompt-ids 1,2,3 -n 4 --json
  fi
  echo "get_gpt2.sh: $dir loads and generates"
}

name=gpt2 out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --check) [ $# -ge 2 ] || { echo "get_gpt2.sh: --check needs a folder" >&2; exit 2; }
             check "$2"; exit 0 ;;
    --out) [ $# -ge 2 ] || { echo "get_gpt2.sh: --out needs a folder" >&2; exit 2; }
           out="$2"; shift 2 ;;
    -h|--help) sed -n '3,10p' "$0"; exit 0 ;;
    *) name="$1"; shift ;;
  esac
done
case "$name" in
  gpt2|gpt2-medium|gpt2-large|gpt2-xl) repo="openai-community/$name" ;;
  distilgpt2) repo="distilbert/distilgpt2" ;;
  *) echo "get_gpt2.sh: unknown model '$name' (gpt2, gpt2-medium, gpt2-large, gpt2-xl, distilgpt2)" >&2
     exit 2 ;;
esac
out="${out:-$root/models/$name}"

if ! curl -sSf -o /dev/null --max-time 15 "$endpoint/api/models/$repo" 2>/dev/null; then
  cat >&2 <<MSG
get_gpt2.sh: cannot reach $endpoint (no network here?), so $repo cannot be downloaded.
  On a machine with a network:  hf download $repo ${files[*]} --local-dir $name
  then copy the folder here and:  scripts/get_gpt2.sh --check DIR
  Offline, \`servekit generate\` without --model (or Gpt2<Cfg>::random(seed) in C++) runs a
  seeded random GPT-2 of the same cost; its text is meaningless.
MSG
  exit 3
fi
mkdir -p "$out"
echo "get_gpt2.sh: downloading $repo into $out"
if command -v hf >/dev/null; then
  hf download "$repo" "${files[@]}" --local-dir "$out"
elif command -v huggingface-cli >/dev/null; then
  huggingface-cli download "$repo" "${files[@]}" --local-dir "$out"
else
  for f in "${files[@]}"; do
    curl -fL --progress-bar -o "$out/$f" "$endpoint/$repo/resolve/main/$f"
  done
fi
check "$out"
