#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# JSON-schema grammar engines side by side (bench/grammar/peers.py): servekit, llguidance,
# XGrammar and outlines-core, the same schemas, documents and GPT-2 vocabulary, in one run.
#   bash bench/grammar/run.sh [--reps N] [--engines a,b,...] [--out DIR]   (default out/bench_grammar)
# Builds bench_grammar_masks (scripts/build.sh's tree) and installs the peers from PyPI into
# .venv-grammar: llguidance, xgrammar (which brings torch and its CUDA libraries; they stay
# unused), outlines-core, transformers, tokenizers, numpy, matplotlib. Not run by CI: it
# downloads.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${SERVEKIT_BUILD_DIR:-$root/build}"
SERVEKIT_TARGETS=bench_grammar_masks bash "$root/scripts/build.sh" >&2
py=$(bash "$root/tools/pyvenv.sh" "$root/.venv-grammar" bench/grammar/run.sh \
  llguidance=llguidance xgrammar=xgrammar outlines_core=outlines-core \
  transformers=transformers tokenizers=tokenizers numpy=numpy matplotlib=matplotlib | tail -1)
echo "bench/grammar: $("$py" -m pip list 2>/dev/null |
  grep -iE '^(llguidance|xgrammar|outlines.core|torch) ' | tr -s ' ' | paste -sd, -)" >&2
exec "$py" "$root/bench/grammar/peers.py" --servekit "$build/bench/bench_grammar_masks" "$@"
