#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configures and builds servekit into ${SERVEKIT_BUILD_DIR:-build}. Extra args go to cmake.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${SERVEKIT_BUILD_DIR:-$root/build}"
bash "$root/scripts/setup.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVEKIT_BENCH_BUILD_ONLY=OFF -DSERVEKIT_QUICK_BUILD=OFF "$@" >/dev/null
echo "build: compiling into $build (first build takes a few minutes on 2 cores)"
cmake --build "$build" -j"$(nproc)" ${SERVEKIT_TARGETS:+--target $SERVEKIT_TARGETS}
