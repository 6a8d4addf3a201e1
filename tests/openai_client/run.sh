#!/usr/bin/env bash
# Runs `caflm serve` under the official `openai` npm client (pinned in
# package-lock.json): installs the client when it is missing or stale, then
# runs client_test.mjs against a small random model.
# Usage: run.sh CAFLM_BINARY WORK_DIR
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
caflm="$1"
work="$2"
mkdir -p "$work"
# npm ci into the build tree, so the source tree stays clean.
if ! cmp -s "$here/package-lock.json" "$work/package-lock.json" || [[ ! -d $work/node_modules ]]; then
  cp "$here/package.json" "$here/package-lock.json" "$work/"
  (cd "$work" && npm ci --no-audit --no-fund --loglevel=error)
fi
cp "$here/client_test.mjs" "$work/"
"$caflm" make-test-model --out "$work/model.gguf" --arch llama --dim 64 --layers 2 --heads 4 \
  --kv-heads 2 --ffn 128 --context 8192 --seed 5 >/dev/null
cd "$work" && node client_test.mjs "$caflm" "$work/model.gguf"
