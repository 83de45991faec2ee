#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages servekit's build, tests and examples need, only those missing,
# and says which. Needs root (or sudo) only when something is missing.
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config catch2 nlohmann-json3-dev libcli11-dev libboost-context-dev libboost1.74-dev
  libicu-dev gnuplot-nox clang libclang-rt-14-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all build packages present (${pkgs[*]})"
  exit 0
fi
echo "setup: installing missing Debian packages: ${missing[*]}"
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
$sudo_cmd apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
