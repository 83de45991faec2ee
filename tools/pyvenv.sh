#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Makes a Python venv if it is not there and pip-installs the packages whose module does not
# import. Prints the venv's python on its last line. Used by venv.sh and server_venv.sh.
#   usage: tools/pyvenv.sh VENV_DIR WHO MODULE=PACKAGE ...
set -euo pipefail
venv="$1" who="$2"
shift 2
if [ ! -x "$venv/bin/python" ]; then
  echo "$who: creating a Python venv at $venv" >&2
  python3 -m venv "$venv"
fi
py="$venv/bin/python"
missing=()
for pair in "$@"; do
  "$py" -c "import ${pair%%=*}" 2>/dev/null || missing+=("${pair#*=}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "$who: pip installing into $venv: ${missing[*]}" >&2
  "$py" -m pip install -q --disable-pip-version-check "${missing[@]}" >&2
fi
echo "$py"
