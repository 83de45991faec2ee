#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Creates .venv-tools (Python packages used only by tools/ to make reference fixtures) and
# installs what is missing: torch (CPU use only), transformers, tokenizers, safetensors, numpy,
# peft. Prints the path of the venv's python on its last line.
#   usage: tools/venv.sh [minimal]   (minimal: only tokenizers + transformers, no torch)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
want=(transformers=transformers tokenizers=tokenizers safetensors=safetensors numpy=numpy)
[ "${1:-}" = minimal ] || want+=(torch=torch peft=peft)
exec bash "$root/tools/pyvenv.sh" "${SERVEKIT_TOOLS_VENV:-$root/.venv-tools}" tools/venv.sh \
  "${want[@]}"
