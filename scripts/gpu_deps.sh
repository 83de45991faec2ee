#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Downloads (does not install) the Debian packages the CUDA build needs besides the toolkit,
# into .gpu-deps/ (git-ignored), for a machine with a GPU that cannot reach a package
# registry: scripts/gpu_check.sh unpacks them there into a private prefix.
#   scripts/gpu_deps.sh            # here, with network
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST="$ROOT/.gpu-deps"
mkdir -p "$DEST"
EXCLUDE="$(git -C "$ROOT" rev-parse --absolute-git-dir)/info/exclude"
mkdir -p "$(dirname "$EXCLUDE")"
grep -qxF '/.gpu-deps/' "$EXCLUDE" 2>/dev/null || echo '/.gpu-deps/' >>"$EXCLUDE"
# Headers (Catch2 2, nlohmann-json, CLI11) and ICU (the tokenizer's normalisation), with the
# ICU runtime it links to.
pkgs=(catch2 nlohmann-json3-dev libcli11-dev libicu-dev libicu72 icu-devtools)
echo "gpu_deps: downloading ${pkgs[*]} into $DEST"
(cd "$DEST" && apt-get download "${pkgs[@]}")
du -sh "$DEST"
