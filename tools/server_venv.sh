#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Creates .venv-server (the Python clients the server's tests and examples drive it with) and
# pip-installs what is missing: lorax-client, openai, text-generation, prometheus-client,
# requests, aiohttp, pytest, matplotlib. Prints the venv's python on its last line.
#   usage: tools/server_venv.sh          (SERVEKIT_SERVER_VENV=DIR puts it elsewhere)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${SERVEKIT_SERVER_VENV:-$root/.venv-server}"
if [ ! -x "$venv/bin/python" ]; then
  echo "tools/server_venv.sh: creating a Python venv at $venv" >&2
  python3 -m venv "$venv"
fi
py="$venv/bin/python"
# module to import -> PyPI package
mods=(lorax openai text_generation prometheus_client requests aiohttp pytest matplotlib)
pkgs=(lorax-client openai text-generation prometheus-client requests aiohttp pytest matplotlib)
missing=()
for i in "${!mods[@]}"; do "$py" -c "import ${mods[$i]}" 2>/dev/null || missing+=("${pkgs[$i]}"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "tools/server_venv.sh: pip installing into $venv: ${missing[*]}" >&2
  "$py" -m pip install -q --disable-pip-version-check "${missing[@]}" >&2
fi
echo "$py"
