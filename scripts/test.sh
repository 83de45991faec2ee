#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what is missing (Debian packages; the Python clients of the server tests), builds
# everything, runs every test (ctest). Extra args go to ctest,
# e.g. `scripts/test.sh -L host`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${SERVEKIT_BUILD_DIR:-$root/build}"
# The CLI and lessons for the model shapes the tests run only (SERVEKIT_DIMS, CMakeLists.txt).
# In CI the benchmarks only have to build: unoptimised, in half the time (bench/CMakeLists.txt).
# Likewise the nvcc programs only have to build and start there (no GPU): PTX alone, no ptxas,
# host code and cicc -O0. And everything else compiles -O1 there, the lessons and the briefest
# tests -Og (SERVEKIT_QUICK_BUILD, CMakeLists.txt, tests/CMakeLists.txt): 40-60% less compile
# time; the -O3 build is what this command checks anywhere else.
bench_build_only=OFF cuda_archs="80-real;90" quick=OFF
if [ "${CI:-}" = true ]; then bench_build_only=ON cuda_archs=90-virtual quick=ON; fi
bash "$root/scripts/build.sh" -DSERVEKIT_DIMS=tests -DSERVEKIT_BENCH_BUILD_ONLY=$bench_build_only \
  "-DSERVEKIT_CUDA_ARCHITECTURES=$cuda_archs" -DSERVEKIT_QUICK_BUILD=$quick
# The server's tests drive it with the real Python clients: their venv (made once, from PyPI).
bash "$root/tools/server_venv.sh" >/dev/null
cd "$build"
ctest --output-on-failure -j"$(nproc)" "$@"
