#!/usr/bin/env bash
# The request limits an operator sets on the command line hold where the
# request runs: `generate` on its local replica, `worker` for whoever sends
# to it, `serve` for HTTP clients. A request within them is served; one
# beyond them is refused with an error that names the limit; a limit that
# cannot work is refused before the model loads.
# Usage: request_limit_options.sh CAFLM_BINARY WORK_DIR
set -euo pipefail
caflm="$1"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work="$2"
mkdir -p "$work"
cd "$work"
rm -f ./*.out ./*.err ./*.json
# shellcheck source=support/script_helpers.sh
source "$here/support/script_helpers.sh"
pids=()
trap 'for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done' EXIT

failure_logs=(worker.err serve.err)

"$caflm" make-test-model --out model.gguf --arch llama --dim 64 --layers 2 --heads 4 \
  --kv-heads 2 --ffn 128 --context 512 --seed 5 >/dev/null
long_prompt="one two three four five six seven eight nine ten eleven twelve"
greedy=(--temperature 0 --device cpu)

# --- generate, on its local replica.
"$caflm" generate --model model.gguf --prompt "$long_prompt" --max-tokens 4 "${greedy[@]}" \
  --max-prompt-tokens 64 --max-tokens-limit 4 --json >within.json ||
  fail "a request within the limits was refused"
grep -q '"finish_reason"' within.json || fail "$(cat within.json)"
must_fail_saying "tokens; at most 3" "$caflm" generate --model model.gguf --prompt "$long_prompt" \
  --max-tokens 4 "${greedy[@]}" --max-prompt-tokens 3
must_fail_saying "max_tokens is 8; at most 4" "$caflm" generate --model model.gguf --prompt hi \
  --max-tokens 8 "${greedy[@]}" --max-tokens-limit 4
must_fail_saying "stop holds 2 strings; at most 1" "$caflm" generate --model model.gguf --prompt hi \
  --stop a --stop b "${greedy[@]}" --max-stop-strings 1
must_fail_saying "at most 3" "$caflm" generate --model model.gguf --prompt hi --stop abcd \
  "${greedy[@]}" --max-stop-bytes 3
must_fail_saying "bytes; at most 4" "$caflm" generate --model model.gguf --prompt "$long_prompt" \
  "${greedy[@]}" --max-prompt-bytes 4
# Limits that cannot work, refused while the options are read.
must_fail_saying "--max-prompt-bytes" "$caflm" generate --model model.gguf --prompt hi \
  --max-prompt-bytes 0
must_fail_saying "--request-lifetime" "$caflm" worker --model model.gguf --port 0 \
  --request-lifetime -1

# --- worker: its own limits, whoever sends.
"$caflm" worker --model model.gguf --port 0 --device cpu --max-prompt-tokens 3 \
  >worker.out 2>worker.err &
pids+=($!)
wait_for_line worker.out "listening on" "${pids[-1]}"
address=$(sed -n 's/.*listening on \(127\.0\.0\.1:[0-9]*\).*/\1/p' worker.out)
"$caflm" generate --model model.gguf --worker "$address" --prompt hi --max-tokens 2 \
  --temperature 0 >/dev/null || fail "the worker refused a request within its limits"
must_fail_saying "tokens; at most 3" "$caflm" generate --model model.gguf --worker "$address" \
  --prompt "$long_prompt" --max-tokens 2 --temperature 0

# --- serve: HTTP clients hear 400 naming the limit.
"$caflm" serve --model model.gguf --port 0 --device cpu --max-tokens-limit 4 \
  --request-lifetime 600 >serve.out 2>serve.err &
pids+=($!)
wait_for_line serve.out "listening on" "${pids[-1]}"
url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' serve.out)
completion() { # MAX_TOKENS: the HTTP status, the body in completion.json
  curl -s -o completion.json -w '%{http_code}' "$url/v1/completions" \
    -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"hi\", \"max_tokens\": $1, \"temperature\": 0}"
}
[[ $(completion 4) == 200 ]] || fail "serve refused a request within its limits: $(cat completion.json)"
[[ $(completion 8) == 400 ]] || fail "serve took max_tokens beyond its limit: $(cat completion.json)"
grep -q "at most 4" completion.json || fail "$(cat completion.json)"
echo "request limit options: generate, worker and serve hold them"
