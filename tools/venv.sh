#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Creates .venv-tools (Python packages used only by tools/ to make reference fixtures) and
# installs what is missing: torch (CPU use only), transformers, tokenizers, safetensors, numpy,
# peft. Prints the path of the venv's python on its last line.
#   usage: tools/venv.sh [minimal]   (minimal: only tokenizers + transformers, no torch)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${SERVEKIT_TOOLS_VENV:-$root/.venv-tools}"
if [ ! -x "$venv/bin/python" ]; then
  echo "tools/venv.sh: creating a Python venv at $venv" >&2
  python3 -m venv "$venv"
fi
py="$venv/bin/python"
want=(transformers tokenizers safetensors numpy)
[ "${1:-}" = minimal ] || want+=(torch peft)
missing=()
for p in "${want[@]}"; do "$py" -c "import $p" 2>/dev/null || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "tools/venv.sh: pip installing into $venv: ${missing[*]}" >&2
  "$py" -m pip install -q "${missing[@]}" >&2
fi
echo "$py"
