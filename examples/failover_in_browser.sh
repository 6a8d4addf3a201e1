#!/usr/bin/env bash
# The multi-process failover demo behind `caflm serve`, to watch in a browser.
#
# Two `caflm worker` processes (A and B) serve one model on loopback behind
# `caflm serve`. Open the printed address: `/cluster` shows both engines up.
# Six streaming requests run once without a fault, then again while worker B
# is killed with SIGKILL mid-stream: the dashboard marks B lost, the timeline
# shows each of B's requests moved to A, and every answer ends with the text
# of the fault-free run. Chat on `/` meanwhile, and your answer survives too.
#
#   examples/failover_in_browser.sh [--port 8080] [--caflm PATH] [--model FILE]
#                                   [--wait SECONDS] [--keep]
#
# --wait: seconds to wait before each run, to open the browser (default 10).
# --keep: leave the cluster running after the demo, until Ctrl-C.
# Exits 0 when some requests moved from B to A and every request finished
# with the fault-free text, 1 otherwise.
set -euo pipefail

port=8080
caflm=
model=
wait_s=10
keep=0
while (($#)); do
  case $1 in
    --port) port=$2; shift 2 ;;
    --caflm) caflm=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --wait) wait_s=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    *) sed -n '/^#   examples/,/^# with the fault-free/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
caflm=${caflm:-$here/../build/apps/caflm}
[[ -x $caflm ]] || { echo "no caflm binary at $caflm (build first, or --caflm PATH)" >&2; exit 2; }
work=$(mktemp -d /tmp/caflm-browser-demo.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# 1. A model, unless one was given: small and random, with a chat template.
if [[ -z $model ]]; then
  model=$work/model.gguf
  "$caflm" make-test-model --out "$model" --arch llama --dim 256 --layers 4 --heads 8 \
    --kv-heads 4 --ffn 512 --context 2048 --seed 1 >/dev/null
fi

# 2. Two workers, one OpenMP thread each, on free ports.
start_worker() { # NAME (in this shell, so that its pid is kept)
  OMP_NUM_THREADS=1 "$caflm" worker --model "$model" --host 127.0.0.1 --port 0 \
    --kv-cache-mb 64 >"$work/$1.out" 2>"$work/$1.err" &
  pids+=($!)
}
address_of() { # NAME: the address the worker listens on, once it does
  for _ in $(seq 300); do
    grep -q "listening" "$work/$1.out" 2>/dev/null && break
    sleep 0.1
  done
  sed -n 's/.* \(127\.0\.0\.1:[0-9]*\).*/\1/p' "$work/$1.out" | head -1
}
start_worker A
start_worker B
b_pid=${pids[-1]}
a=$(address_of A)
b=$(address_of B)
[[ -n $a && -n $b ]] || { cat "$work"/*.err; echo "a worker did not start" >&2; exit 1; }
echo "worker A listens on $a, worker B on $b"

# 3. The server over both, with the console.
"$caflm" serve --model "$model" --replicas 0 --worker "$a" --worker "$b" --host 127.0.0.1 \
  --port "$port" --chat-template chatml >"$work/serve.out" 2>"$work/serve.err" &
pids+=($!)
url=
for _ in $(seq 300); do
  url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$work/serve.out")
  [[ -n $url ]] && break
  sleep 0.1
done
[[ -n $url ]] || { cat "$work/serve.err"; echo "caflm serve did not start" >&2; exit 1; }
until curl -sf "$url/health" >/dev/null; do sleep 0.2; done
echo
echo "open $url/cluster (the dashboard) and $url/ (chat) in a browser"
sleep "$wait_s"

# 4. Six long requests, streamed; their text is kept per run.
run() { # NAME
  local i
  for i in 1 2 3 4 5 6; do
    curl -sN "$url/v1/completions" -H 'Content-Type: application/json' \
      -d "{\"prompt\": \"Tell me a long story, number $i.\", \"max_tokens\": 1000,
           \"ignore_eos\": true, \"temperature\": $((i % 2)), \"seed\": $((41 + i)),
           \"stream\": true}" >"$work/$1.$i.sse" &
  done
}
text_of() { # FILE: the streamed text, joined, as JSON (a random model's text may hold NULs)
  python3 -c 'import json,sys
text = ""
for line in open(sys.argv[1]):
    if line.startswith("data: {"):
        chunk = json.loads(line[6:])
        if "error" in chunk: sys.exit("error: " + chunk["error"]["message"])
        text += "".join(c.get("text", "") for c in chunk["choices"])
print(json.dumps(text))' "$1"
}
echo "fault-free run: six requests of 1000 tokens"
run calm
wait_for_requests() { while pgrep -f "curl -sN $url" >/dev/null; do sleep 0.2; done; }
wait_for_requests

echo "the same six requests again; worker B is killed 1 s in (watch $url/cluster)"
sleep "$wait_s"
run fault
sleep 1
kill -KILL "$b_pid" && wait "$b_pid" 2>/dev/null || true
echo "SIGKILLed worker B"
wait_for_requests
moved=$(curl -sf "$url/metrics" | sed -n 's/^caflm_failovers_total{.*} \([0-9]*\).*/\1/p')
echo "${moved:-0} request(s) moved from B to A"

ok=1
for i in 1 2 3 4 5 6; do
  if [[ "$(text_of "$work/calm.$i.sse")" == "$(text_of "$work/fault.$i.sse")" ]]; then
    echo "request $i: same as the fault-free run"
  else
    echo "request $i: DIFFERENT from the fault-free run"
    ok=0
  fi
done
if ((${moved:-0} == 0)); then
  echo "no request was running on B when it died: nothing was shown"
  ok=0
fi
((ok)) && echo "OK: every stream survived the kill unchanged" || echo "FAILED"
if ((keep)); then
  echo "the cluster stays up at $url until Ctrl-C"
  wait
fi
((ok))
