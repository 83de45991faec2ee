#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Lesson 7 end to end: starts the 07_server program (your own policy composition behind
# serve::http::HttpServer) on the tiny fixture model with three adapters under the course's
# adapter ids, runs the course's client snippets against it, and stops it with SIGTERM.
#   bash examples/07_server/run.sh          (after scripts/build.sh)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${SERVEKIT_BUILD_DIR:-$root/build}"
py="$(bash "$root/tools/server_venv.sh" | tail -1)"
fx="$root/tests/fixtures"
port="${PORT:-8080}"
log="$(mktemp)"
[ -x "$build/examples/07_server" ] || { echo "run.sh: no $build/examples/07_server: run scripts/build.sh" >&2; exit 1; }
"$build/examples/07_server" --model "$fx/tiny-a" --vocab "$fx/tiny-vocab" --port "$port" \
  --adapter "predibase/hellaswag_processed=$fx/tiny-a/lora/r4" \
  --adapter "predibase/cnn=$fx/tiny-a/lora/r8" \
  --adapter "predibase/conllpp=$fx/tiny-a/lora/r16" 2> "$log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q listening "$log" && break; sleep 0.1; done
cat "$log"
grep -q listening "$log" || { echo "run.sh: 07_server did not start" >&2; exit 1; }
"$py" "$root/examples/07_server/client.py" "http://127.0.0.1:$port" "$root/out/07_server"
kill -TERM $pid
wait $pid
echo "07_server exited $? after SIGTERM"
