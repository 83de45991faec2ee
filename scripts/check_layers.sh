#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The library's layers, lowest first: a header may include its own folder and any folder of a
# lower layer, never a higher one. Folders on one line are one layer and may include each other.
# Prints every upward include (file:line, from -> to) and fails if there is one, or if a folder
# under include/servekit/ is in no layer. Usage: check_layers.sh [include/servekit]
set -euo pipefail
root=${1:-"$(dirname "$0")/../include/servekit"}

layers=(
  "core"               # errors, files, dims, row sampling, storage: named by everything
  "io simt text"       # safetensors; the CUDA emulator; the tokenizer
  "weights kv"         # weight formats; KV-cache layouts
  "kernels"            # host and device kernels over plain arrays
  "lora"               # adapter policies and PEFT adapters
  "backend"            # Ops: which kernel runs each op, per backend
  "model"              # the decoder: weights, step plan, runner, adapter registry
  "constrain"          # grammar engine and token masks
  "serve"              # engine, schedulers, HTTP
)

declare -A rank
for i in "${!layers[@]}"; do
  for d in ${layers[$i]}; do rank[$d]=$i; done
done

bad=0
for dir in "$root"/*/; do
  d=$(basename "$dir")
  if [[ -z "${rank[$d]+x}" ]]; then
    echo "check_layers: include/servekit/$d/ is in no layer (add it to scripts/check_layers.sh)"
    bad=1
  fi
done

while IFS=: read -r file line text; do
  from=$(basename "$(dirname "$file")")
  to=$(sed -E 's|.*#include "servekit/([a-z_]+)/.*|\1|' <<<"$text")
  [[ -z "${rank[$from]+x}" || -z "${rank[$to]+x}" ]] && continue
  if ((rank[$to] > rank[$from])); then
    echo "check_layers: ${file#"$root"/}:$line: $from includes $to, a higher layer"
    bad=1
  fi
done < <(grep -rnE '^#include "servekit/[a-z_]+/' "$root" --include='*.hpp' --include='*.cuh' || true)

if ((bad)); then exit 1; fi
echo "check_layers: no upward include in $(grep -rlE '^#include "servekit/' "$root" | wc -l) headers"
