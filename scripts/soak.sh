#!/usr/bin/env bash
# Soak test of a caflm cluster under faults: one `caflm serve` coordinator and
# three `caflm worker` processes on loopback, linked with mutual TLS, under a
# steady mixed load of deterministic requests while workers are killed and
# restarted or stopped and continued, one at a time.
#
# Checks, and exits 1 when one fails (the report says which):
# - every completed request has exactly the text and finish reason a
#   fault-free single-engine server gave it (none ALTERED);
# - no request fails unless a fault overlapped it (failures are counted by
#   their HTTP status and error either way);
# - every worker comes back after each fault and no process exits on its own;
# - at the end every engine is up, idle, holds KV blocks only for its prefix
#   cache, and still runs a sequence as long as its whole KV pool (blocks a
#   lost request kept would make that impossible);
# - no process's RSS, open fds or threads grow steadily after warm-up.
#
# Usage: scripts/soak.sh [--minutes M] [--out DIR] [--caflm BIN] [--seed S]
#                        [--clients C] [--sample-s S]
# Everything (model, PKI, logs, CSVs, the report) goes to DIR
# (default: soak-out).
set -euo pipefail

minutes=30
out=soak-out
caflm=
seed=1
clients=4
sample_s=10
usage() { sed -n '/^# Usage:/,/^# (default/p' "$0" | sed 's/^# //' >&2; exit 2; }
while (($#)); do
  case $1 in
    --minutes) minutes=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --caflm) caflm=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --sample-s) sample_s=$2; shift 2 ;;
    -h | --help) usage ;;
    *) echo "soak.sh: unknown argument $1" >&2; usage ;;
  esac
done
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
caflm=${caflm:-$here/../build/apps/caflm}
[[ -x $caflm ]] || { echo "soak.sh: no caflm binary at $caflm (--caflm BIN)" >&2; exit 2; }
caflm=$(cd "$(dirname "$caflm")" && pwd)/$(basename "$caflm")
client=(python3 "$here/soak_client.py")
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$out"
rm -rf pki model.gguf ./*.out ./*.err ./*.pid ./*.csv ./*.jsonl ./*.prom ./*.txt ./*.log stop stop_sampler

# The model: small enough to run several engines on a couple of cores. The
# workers' 1 MiB KV pool holds 1,024 tokens at this shape (2 layers x K,V x
# 2 heads x 32 dims x 4 bytes), the model's whole context: steady load
# preempts, and the final probe needs every block of the pool.
context=1024
worker_kv_mb=1
block_size=16
workers=3

now() { date +%s.%N; }
say() { echo "[$(date -u +%H:%M:%S)] $*"; }
die() { say "soak.sh: $*" >&2; exit 1; }
tls() { echo --tls-cert "pki/node-$1.pem" --tls-key "pki/node-$1-key.pem" --tls-ca pki/ca.pem; }

# Every process this script starts, by pid file, so that cleanup ends
# exactly those (a stopped worker is continued first, or it would not die).
# shellcheck disable=SC2317 # called by the trap
cleanup() {
  touch "$out/stop" "$out/stop_sampler" 2>/dev/null || true
  local f pid
  for f in "$out"/*.pid; do
    [[ -f $f ]] || continue
    pid=$(cat "$f")
    kill -CONT "$pid" 2>/dev/null || true
    kill "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_for_line() { # FILE PATTERN PID COUNT: until FILE has COUNT lines matching
  for _ in $(seq 600); do
    (($(grep -c "$2" "$1" 2>/dev/null || true) >= $4)) && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# watched NAME COMMAND...: runs COMMAND in the background, its pid in
# NAME.pid, and logs how it ended to exits.log (137: SIGKILL, 139: SIGSEGV,
# 134: abort), so that a process that dies on its own is told from one the
# injector killed.
watched() {
  local name=$1
  shift
  (
    "$@" &
    pid=$!
    echo "$pid" >"$name.pid.new" && mv "$name.pid.new" "$name.pid"
    trap '' TERM
    status=0
    wait "$pid" || status=$?
    # wait also returns when the process is stopped (SIGSTOP: 147).
    while ((status == 147)) && kill -0 "$pid" 2>/dev/null; do
      status=0
      wait "$pid" || status=$?
    done
    echo "$(now) $name $pid $status" >>"$out/exits.log"
  ) &
  for _ in $(seq 100); do [[ -f $name.pid ]] && return 0; sleep 0.05; done
}

# start_worker N PORT: worker N (node-N's certificate) on PORT (0: any);
# returns once it listens, retrying while the port is still in use.
start_worker() {
  local n=$1 port=$2 attempt before pid
  for attempt in $(seq 30); do
    before=$(grep -c "listening on" "worker-$n.out" 2>/dev/null || true)
    rm -f "worker-$n.pid"
    # shellcheck disable=SC2046
    watched "worker-$n" "$caflm" worker --model model.gguf --port "$port" --device cpu \
      --kv-cache-mb "$worker_kv_mb" --log-level info $(tls "$n") >>"worker-$n.out" 2>>"worker-$n.err"
    pid=$(cat "worker-$n.pid")
    if wait_for_line "worker-$n.out" "listening on" "$pid" $((before + 1)); then
      sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "worker-$n.out" | tail -1 >"worker-$n.port"
      return 0
    fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    # An attempt that found the port still held by the worker just killed
    # ended as this loop expects; any other end stays for the report to judge.
    if tail -n 1 "worker-$n.err" | grep -q "already in use"; then
      echo "$pid" >>stopped_pids.txt
    fi
    echo "worker $n did not start (attempt $attempt)" >>"worker-$n.err"
    sleep 1
  done
  return 1
}

# start_serve NAME ARGS...: a `caflm serve` on any port; sets serve_url.
start_serve() {
  local name=$1 pid
  shift
  watched "$name" "$caflm" serve --model model.gguf --port 0 --device cpu --log-level info "$@" \
    >"$name.out" 2>"$name.err"
  pid=$(cat "$name.pid")
  wait_for_line "$name.out" "listening on" "$pid" 1 || die "$name did not start: $(cat "$name.err")"
  serve_url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$name.out")
}

stop_pid_file() { # NAME: ends the process of NAME.pid and forgets it
  local pid
  pid=$(cat "$1.pid")
  echo "$pid" >>stopped_pids.txt
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -f "$1.pid"
}

# engine_field ENGINE FIELD: a caflm_engine_* figure from the coordinator's
# /metrics (FIELD: up running waiting used total), empty when not there.
engine_field() {
  local col
  case $2 in up) col=2 ;; running) col=3 ;; waiting) col=4 ;; used) col=5 ;; total) col=6 ;; esac
  "${client[@]}" metrics "$url" | awk -F, -v e="$1" -v c="$col" '$1 == e {print $c}'
}

say "soak: ${minutes} min, seed $seed, $clients clients, output in $out"
"$caflm" make-test-model --out model.gguf --arch llama --dim 128 --layers 2 --heads 4 \
  --kv-heads 2 --ffn 256 --context "$context" --seed "$seed" >/dev/null
"$caflm" certs --out pki --nodes $((workers + 2)) >/dev/null # + coordinator + probe client
"${client[@]}" pool pool.jsonl --seed "$seed" --count 200

# --- Reference answers from a fault-free single-engine server.
start_serve reference --replicas 1 --kv-cache-mb 64 --max-queue 1024
say "reference run on $serve_url"
"${client[@]}" reference "$serve_url" pool.jsonl references.jsonl --clients "$clients" ||
  die "the reference run failed"
stop_pid_file reference

# --- The cluster.
for n in $(seq "$workers"); do
  start_worker "$n" 0 || die "worker $n did not start: $(cat "worker-$n.err")"
done
worker_args=()
for n in $(seq "$workers"); do worker_args+=(--worker "127.0.0.1:$(cat "worker-$n.port")"); done
# shellcheck disable=SC2046
start_serve coordinator --replicas 0 "${worker_args[@]}" --max-queue 4096 \
  --kv-cache-mb 16 $(tls $((workers + 1)))
url=$serve_url
coordinator_pid=$(cat coordinator.pid)
for n in $(seq "$workers"); do
  for _ in $(seq 100); do
    [[ $(engine_field "127.0.0.1:$(cat "worker-$n.port")" up) == 1 ]] && break
    sleep 0.2
  done
done
say "cluster: coordinator $url, workers on ports $(cat worker-*.port | tr '\n' ' ')"

# --- Samples every $sample_s s: each process's RSS, fds and threads, and
# each engine's KV blocks.
echo "time_s,process,pid,rss_kib,fds,threads" >processes.csv
echo "time_s,engine,up,running,waiting,kv_used,kv_total" >engines.csv
echo "time_s,failovers" >failovers.csv
sample_process() { # NAME PID
  local status rss threads fds
  status=$(cat "/proc/$2/status" 2>/dev/null) || return 0
  rss=$(awk '/^VmRSS:/ {print $2}' <<<"$status")
  threads=$(awk '/^Threads:/ {print $2}' <<<"$status")
  fds=$(find "/proc/$2/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
  echo "$t,$1,$2,$rss,$fds,$threads" >>processes.csv
}
sampler() {
  local t n rows
  while [[ ! -f stop_sampler ]]; do
    t=$(now)
    sample_process coordinator "$coordinator_pid"
    for n in $(seq "$workers"); do sample_process "worker-$n" "$(cat "worker-$n.pid")"; done
    kill -0 "$coordinator_pid" 2>/dev/null ||
      echo "the coordinator (pid $coordinator_pid) exited during the soak" >>unexpected_exits.txt
    rows=$("${client[@]}" metrics "$url" || true)
    grep -v '^failovers,' <<<"$rows" | sed "s/^/$t,/" >>engines.csv || true
    grep '^failovers,' <<<"$rows" | sed "s/^failovers,/$t,/" >>failovers.csv || true
    for _ in $(seq "$sample_s"); do [[ -f stop_sampler ]] && break; sleep 1; done
  done
}

# --- Faults: every 10-40 s one worker is killed (SIGKILL, then restarted on
# its port with its certificate) or stopped for 2-6 s (SIGSTOP, SIGCONT).
# The next fault waits until the coordinator has the worker up again, so at
# most one worker is ever down.
injector() {
  RANDOM=$seed
  local gap n pid port kind start pause up deadline
  while :; do
    gap=$((10 + RANDOM % 31))
    for _ in $(seq "$gap"); do [[ -f stop ]] && return 0; sleep 1; done
    n=$((1 + RANDOM % workers))
    pid=$(cat "worker-$n.pid")
    port=$(cat "worker-$n.port")
    kill -0 "$pid" 2>/dev/null ||
      echo "worker $n (pid $pid) exited on its own before a fault" >>unexpected_exits.txt
    start=$(now)
    if ((RANDOM % 2)); then
      kind='kill'
      say "fault: SIGKILL worker $n (pid $pid, port $port)" | tee -a faults.log
      kill -KILL "$pid"
      start_worker "$n" "$port" || {
        say "worker $n did not restart" | tee -a faults.log
        echo "{\"kind\":\"$kind\",\"worker\":$n,\"pid\":$pid,\"start\":$start,\"end\":$(now),\"recovered\":false}" >>faults.jsonl
        continue
      }
      say "fault: worker $n restarted (pid $(cat "worker-$n.pid"))" | tee -a faults.log
    else
      kind=stop
      pause=$((2 + RANDOM % 5))
      say "fault: SIGSTOP worker $n (pid $pid) for $pause s" | tee -a faults.log
      kill -STOP "$pid"
      sleep "$pause"
      kill -CONT "$pid"
      say "fault: SIGCONT worker $n" | tee -a faults.log
    fi
    up=false
    deadline=$(($(date +%s) + 60))
    while (($(date +%s) < deadline)); do
      [[ $(engine_field "127.0.0.1:$port" up) == 1 ]] && { up=true; break; }
      sleep 0.2
    done
    $up || say "fault: worker $n not up in the coordinator 60 s after the $kind" | tee -a faults.log
    echo "{\"kind\":\"$kind\",\"worker\":$n,\"pid\":$pid,\"start\":$start,\"end\":$(now),\"recovered\":$up}" >>faults.jsonl
  done
}

sampler &
echo $! >sampler.pid
injector &
echo $! >injector.pid

# --- The load.
say "load: $minutes min against $url"
"${client[@]}" load "$url" pool.jsonl references.jsonl requests.jsonl --minutes "$minutes" \
  --seed "$seed" --clients "$clients" || die "the load client failed"
say "load done; waiting for the injector to finish its fault"
touch stop
wait "$(cat injector.pid)" || true
rm -f injector.pid

# --- The end: idle, then a whole-pool probe of each worker.
"${client[@]}" wait-idle "$url" final_metrics.prom --timeout 120
: >kv_probe.txt
"$caflm" tokenize --model model.gguf --json --no-bos --file pool.jsonl >probe_tokens.json
for n in $(seq "$workers"); do
  port=$(cat "worker-$n.port")
  total=$(engine_field "127.0.0.1:$port" total)
  [[ -n $total ]] || { echo "FAIL: worker $n has no KV pool in /metrics" >>kv_probe.txt; continue; }
  longest=$((total * block_size < context ? total * block_size : context))
  # A prompt of random tokens of the vocabulary (so no cached prefix) and
  # 16 tokens to generate: the whole pool, to the last block.
  python3 - "$longest" "$seed$n" >"probe-$n.jsonl" <<'EOF'
import json, random, sys
longest, seed = int(sys.argv[1]), int(sys.argv[2])
tokens = sorted(set(json.load(open("probe_tokens.json"))["tokens"]))
rng = random.Random(seed)
prompt = [rng.choice(tokens) for _ in range(longest - 16)]
print(json.dumps({"prompt_tokens": prompt, "max_tokens": 16, "temperature": 0,
                  "ignore_eos": True}))
EOF
  # shellcheck disable=SC2046
  if timeout 120 "$caflm" generate --worker "127.0.0.1:$port" $(tls $((workers + 2))) \
    --requests "probe-$n.jsonl" --json >"probe-$n.out" 2>"probe-$n.err" &&
    grep -q '"tokens"' "probe-$n.out"; then
    echo "probe: worker $n ran a $longest-token sequence (its whole pool of $total blocks)" >>kv_probe.txt
  else
    echo "FAIL: worker $n could not run a $longest-token sequence in its $total-block pool (KV blocks leaked?): $(head -c 300 "probe-$n.out" "probe-$n.err" | tr '\n' ' ')" >>kv_probe.txt
  fi
done
"${client[@]}" wait-idle "$url" after_probe_metrics.prom --timeout 60

# Processes that died on their own, and crash traces in the logs.
kill -0 "$coordinator_pid" 2>/dev/null || echo "the coordinator exited" >>unexpected_exits.txt
for n in $(seq "$workers"); do
  kill -0 "$(cat "worker-$n.pid")" 2>/dev/null || echo "worker $n exited" >>unexpected_exits.txt
done
grep -H -E "terminate called|Assertion|Segmentation|AddressSanitizer|runtime error:|fatal" \
  ./*.err >>unexpected_exits.txt || true

echo >>stop_sampler
wait "$(cat sampler.pid)" || true
rm -f sampler.pid
cp exits.log exits_during_soak.log 2>/dev/null || : >exits_during_soak.log
"${client[@]}" report "$out" --warmup-s "$((${minutes%.*} >= 5 ? 60 : 30))" | tee report.txt
exit "${PIPESTATUS[0]}"
