#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what is missing, builds everything, runs every test (ctest). Extra args go to ctest,
# e.g. `scripts/test.sh -L host`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${SERVEKIT_BUILD_DIR:-$root/build}"
bash "$root/scripts/build.sh"
cd "$build"
ctest --output-on-failure -j"$(nproc)" "$@"
