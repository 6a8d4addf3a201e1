#!/usr/bin/env bash
# 1,000 concurrent streaming clients through `caflm serve` itself: every
# request completes with all its tokens, none is refused or lost, and the
# server's thread count stays bounded while the 1,000 streams are open (it
# does not grow with the connections). `caflm bench-serve` is the client: it
# holds every stream on one thread. The engine holds tokens up to 1 ms
# (--token-flush-us), so this also checks that tokens coalesced across steps
# all arrive.
# Usage: serve_streams.sh CAFLM_BINARY WORK_DIR
set -euo pipefail
caflm="$1"
work="$2"
clients=1000
output_len=32
thread_bound=48
mkdir -p "$work"
cd "$work"
"$caflm" make-test-model --out model.gguf --arch llama --dim 64 --layers 2 --heads 4 \
  --kv-heads 2 --ffn 128 --context 2048 --seed 7 >/dev/null

# Queues deep enough for every client: this checks that the server holds
# them, not that it refuses them (the 429 path has its own tests).
"$caflm" serve --model model.gguf --port 0 --replicas 1 --max-queue "$clients" \
  --max-concurrent 16 --kv-cache-mb 64 --token-flush-us 1000 --log-level warning >serve.out 2>serve.err &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  grep -q "listening on" serve.out 2>/dev/null && break
  kill -0 "$server" 2>/dev/null || { cat serve.err; echo "caflm serve exited"; exit 1; }
  sleep 0.1
done
url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' serve.out)
[[ -n $url ]] || { cat serve.out serve.err; echo "caflm serve did not say where it listens"; exit 1; }

# The server's threads, sampled while the load runs.
peak=0
sample_threads() {
  local now
  now=$(awk '/^Threads:/ {print $2}' "/proc/$server/status" 2>/dev/null || echo 0)
  ((now > peak)) && peak=$now
  return 0
}
"$caflm" bench-serve --url "$url" --requests "$clients" --rate inf --max-concurrency "$clients" \
  --input-len 16 --output-len "$output_len" --vocab-size 400 --seed 3 --json result.json >bench.out 2>&1 &
bench=$!
while kill -0 "$bench" 2>/dev/null; do
  sample_threads
  sleep 0.05
done
wait "$bench" || { cat bench.out; echo "bench-serve failed"; exit 1; }

python3 - "$clients" "$output_len" "$peak" "$thread_bound" <<'EOF'
import json, sys
clients, output_len, peak, bound = map(int, sys.argv[1:5])
r = json.load(open("result.json"))
completed, failed = r["completed"], r["failed"]
# The most streams open at once: the server queues all but 16 of them, so
# nearly all are open together while the first ones run.
events = sorted([(q["sent_s"], 1) for q in r["requests"]] +
                [(q["finished_s"], -1) for q in r["requests"]], key=lambda e: (e[0], e[1]))
open_now = most_open = 0
for _, change in events:
    open_now += change
    most_open = max(most_open, open_now)
print(f"completed {completed}, failed {failed}, at most {most_open} streams open at once, "
      f"server threads at most {peak}")
errors = []
if completed != clients or failed != 0:
    errors.append(f"expected {clients} completed and 0 failed: {r.get('failures')}")
if r["total_output_tokens"] != clients * output_len:
    errors.append(f"expected {clients * output_len} output tokens, got {r['total_output_tokens']}")
if most_open < clients // 2:
    errors.append(f"only {most_open} streams were open at once")
if peak <= 0 or peak > bound:
    errors.append(f"server threads {peak} not within (0, {bound}]")
if errors:
    sys.exit("; ".join(errors))
EOF
