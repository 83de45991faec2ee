#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Creates .venv-server (the Python clients the server's tests and examples drive it with) and
# pip-installs what is missing: lorax-client, openai, text-generation, prometheus-client,
# requests, aiohttp, pytest, matplotlib, jsonschema (with rfc3339-validator and rfc3987, which its
# date-time, time and uri format checks need). Prints the venv's python on its last line.
#   usage: tools/server_venv.sh          (SERVEKIT_SERVER_VENV=DIR puts it elsewhere)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
exec bash "$root/tools/pyvenv.sh" "${SERVEKIT_SERVER_VENV:-$root/.venv-server}" tools/server_venv.sh \
  lorax=lorax-client openai=openai text_generation=text-generation \
  prometheus_client=prometheus-client requests=requests aiohttp=aiohttp pytest=pytest \
  matplotlib=matplotlib jsonschema=jsonschema rfc3339_validator=rfc3339-validator rfc3987=rfc3987
