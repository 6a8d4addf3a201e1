#!/usr/bin/env bash
# The web console in a real browser: Debian's chromium, headless, driven by
# playwright-core (pinned in package-lock.json), against `caflm serve` over
# two `caflm worker` processes. Installs chromium when it is missing (as the
# quick start installs every package) and playwright-core into WORK_DIR.
# Usage: run.sh CAFLM_BINARY WORK_DIR
# Screenshots go to WORK_DIR/screenshots, and also to $CAFLM_SCREENSHOTS_DIR
# when it is set (`CAFLM_SCREENSHOTS_DIR=docs` refreshes the README's).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$2"
# Absolute, since the test runs from the work directory.
caflm="$(realpath "$1")"
work="$(realpath "$2")"
if ! command -v chromium >/dev/null; then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium
fi
# npm ci into the build tree, so the source tree stays clean.
if ! cmp -s "$here/package-lock.json" "$work/package-lock.json" || [[ ! -d $work/node_modules ]]; then
  cp "$here/package.json" "$here/package-lock.json" "$work/"
  (cd "$work" && npm ci --no-audit --no-fund --loglevel=error)
fi
cp "$here/console_test.mjs" "$work/"
# Big enough that an answer streams for a few seconds on one thread, so a
# worker can be killed in the middle of it.
"$caflm" make-test-model --out "$work/model.gguf" --arch llama --dim 256 --layers 4 --heads 8 \
  --kv-heads 4 --ffn 512 --context 4096 --seed 11 >/dev/null
cd "$work" && node console_test.mjs "$caflm" "$work/model.gguf" "$work"
