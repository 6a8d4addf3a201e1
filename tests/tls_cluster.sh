#!/usr/bin/env bash
# A worker with mutual TLS serves its cluster's nodes and nobody else, and
# bounds what even a member can make it hold:
# - a client with the cluster's certificate gets the same tokens as a local
#   engine, through `generate` and through `serve`;
# - refused before any message is handled: a caflm client without TLS, an
#   openssl client without a certificate and one with a certificate of
#   another CA; plain TCP garbage and a BASP header announcing 4 GiB cost
#   the worker no memory;
# - a member announcing a 4 GiB message, or a frame of an unknown type, is
#   disconnected and logged, with the worker's memory flat; refused peers
#   are logged too;
# - connections beyond the per-peer limit are closed at once, and silent
#   ones once the handshake timeout passes;
# - the worker refuses a non-loopback address without TLS unless --insecure,
#   and certificate files that cannot work, before loading its model.
# The worker keeps serving its real clients throughout.
# Usage: tls_cluster.sh CAFLM_BINARY WORK_DIR
set -euo pipefail
caflm="$1"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work="$2"
mkdir -p "$work"
cd "$work"
rm -rf pki foreign ./*.out ./*.err

# shellcheck source=support/script_helpers.sh
source "$here/support/script_helpers.sh"
failure_logs=(worker.err serve.err)
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

"$caflm" make-test-model --out model.gguf --arch llama --dim 64 --layers 2 --heads 4 \
  --kv-heads 2 --ffn 128 --context 512 --seed 3 >/dev/null
"$caflm" certs --out pki --nodes 3 >/dev/null
"$caflm" certs --out foreign --nodes 1 >/dev/null
tls() { echo --tls-cert "pki/node-$1.pem" --tls-key "pki/node-$1-key.pem" --tls-ca pki/ca.pem; }

# --- Refusals before the model loads.
must_fail "$caflm" worker --model model.gguf --port 0 --host 0.0.0.0 --device cpu
grep -q "refusing to listen on 0.0.0.0 without TLS" must_fail.out || fail "$(cat must_fail.out)"
must_fail "$caflm" worker --model model.gguf --port 0 --device cpu --tls-cert pki/node-1.pem \
  --tls-key pki/node-2-key.pem --tls-ca pki/ca.pem
grep -q "does not belong to the certificate" must_fail.out || fail "$(cat must_fail.out)"
must_fail "$caflm" worker --model model.gguf --port 0 --device cpu --tls-cert foreign/node-1.pem \
  --tls-key foreign/node-1-key.pem --tls-ca pki/ca.pem
grep -q "does not verify against the CA" must_fail.out || fail "$(cat must_fail.out)"
must_fail "$caflm" worker --model model.gguf --port 0 --device cpu --tls-cert pki/node-1.pem
grep -q "needs all three" must_fail.out || fail "$(cat must_fail.out)"

# --insecure listens anywhere, and says what that means.
"$caflm" worker --model model.gguf --port 0 --host 0.0.0.0 --insecure --device cpu \
  >insecure.out 2>insecure.err &
insecure=$!
wait_for_line insecure.out "listening on" "$insecure"
kill "$insecure"
wait "$insecure" || true
grep -q "without TLS (--insecure)" insecure.err || fail "no warning: $(cat insecure.err)"

# --- The TLS worker.
# shellcheck disable=SC2046
"$caflm" worker --model model.gguf --port 0 --device cpu $(tls 1) >worker.out 2>worker.err &
worker=$!
server=
cleanup() {
  kill "$worker" ${server:+"$server"} 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT
wait_for_line worker.out "listening on" "$worker"
port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' worker.out)

request=(--prompt "The quick brown fox" --max-tokens 12 --seed 5 --temperature 0.8 --json)
"$caflm" generate --model model.gguf --device cpu "${request[@]}" >local.json
tokens() { grep -o '"tokens":\[[0-9,]*\]' "$1"; }
# shellcheck disable=SC2046
"$caflm" generate --worker "127.0.0.1:$port" $(tls 2) "${request[@]}" >remote.json ||
  fail "a cluster member was not served"
[[ $(tokens remote.json) == "$(tokens local.json)" ]] ||
  fail "remote tokens $(tokens remote.json) differ from local $(tokens local.json)"
baseline=$(rss_kib "$worker")

# --- serve reaches the worker through TLS too, and stays connected through
# everything below: rogue peers failing their handshakes and silent
# connections timing out never cost a member its link.
# shellcheck disable=SC2046
"$caflm" serve --model model.gguf --replicas 0 --worker "127.0.0.1:$port" --port 0 $(tls 3) \
  >serve.out 2>serve.err &
server=$!
wait_for_line serve.out "listening on" "$server"
url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' serve.out)
curl -sf "$url/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"The quick brown fox","max_tokens":4,"temperature":0}' >completion.json ||
  fail "serve could not complete through the TLS worker: $(cat serve.err)"
grep -q '"completion_tokens":4' completion.json || fail "$(cat completion.json)"

# A caflm client without TLS fails its handshake.
must_fail "$caflm" generate --worker "127.0.0.1:$port" --connect-timeout 3 "${request[@]}"
grep -q "no worker could be reached" must_fail.out || fail "$(cat must_fail.out)"

# openssl clients without a certificate, or with another CA's, are refused
# by the TLS handshake itself.
probe_tls() { # ARGS...: s_client's certificate options
  echo | timeout 10 openssl s_client -connect "127.0.0.1:$port" -tls1_2 -CAfile pki/ca.pem \
    "$@" >probe.out 2>&1 || true
  grep -qi "alert" probe.out || fail "a TLS client ($*) was not refused: $(cat probe.out)"
}
probe_tls
probe_tls -cert foreign/node-1.pem -key foreign/node-1-key.pem

# Plain TCP: garbage, and a BASP header announcing 4 GiB, never reach CAF.
basp_header() { # OPERATION PAYLOAD_HEX8: 32 bytes, big-endian
  printf "\\x$1\\x00\\x00\\x00"
  printf '%b' "$(echo "$2" | sed 's/\(..\)/\\x\1/g')"
  head -c 24 /dev/zero
}
{ basp_header 02 fffffff0; sleep 1; } | timeout 5 bash -c "cat >/dev/tcp/127.0.0.1/$port" || true
head -c 4096 /dev/urandom | timeout 5 bash -c "cat >/dev/tcp/127.0.0.1/$port" || true
sleep 1
(($(rss_kib "$worker") < baseline + 262144)) || fail "plain TCP grew the worker's memory"
# Each refusal above is logged with the peer and OpenSSL's reason: a caflm
# client without TLS (it may retry), two openssl clients, two plain TCP ones.
refusals=$(grep -c "refused the TLS connection of 127.0.0.1:" worker.err || true)
((refusals >= 5)) || fail "only $refusals refused TLS connections logged"
grep -q "refused the TLS connection of .*peer did not return a certificate" worker.err ||
  fail "the client without a certificate was not logged as such"
grep -q "refused the TLS connection of .*certificate failed verification" worker.err ||
  fail "the client with another CA's certificate was not logged as such"

# A member of the cluster is bounded too.
member_sends() { # BYTES...: written through a TLS session with node-3's certificate
  { basp_header "$@"; sleep 2; } | timeout 10 openssl s_client -quiet -connect "127.0.0.1:$port" \
    -tls1_2 -cert pki/node-3.pem -key pki/node-3-key.pem -CAfile pki/ca.pem >/dev/null 2>&1 || true
}
member_sends 02 fffffff0
grep -q "announced a 4294967280-byte message" worker.err || fail "oversized frame not refused"
member_sends 7f 00000000
grep -q "a frame of unknown type 127" worker.err || fail "unknown frame type not refused"
(($(rss_kib "$worker") < baseline + 262144)) || fail "a member grew the worker's memory"

# Silent connections: those past the per-peer limit (64) are closed at once,
# the rest (63 beside serve's link) once the handshake timeout (10 s) passes.
silent=()
for _ in $(seq 80); do
  exec {fd}<>"/dev/tcp/127.0.0.1/$port"
  silent+=("$fd")
done
# Polled, not slept: a loaded machine may take the worker longer than a
# second to accept all 80.
for _ in $(seq 100); do
  (($(grep -c "the most accepted from one peer" worker.err || true) >= 16)) && break
  sleep 0.1
done
refused=$(grep -c "the most accepted from one peer" worker.err || true)
((refused >= 16)) || fail "only $refused connections refused past the per-peer limit"
for _ in $(seq 200); do
  (($(grep -c "no handshake within the timeout" worker.err || true) >= 63)) && break
  sleep 0.1
done
(($(grep -c "no handshake within the timeout" worker.err || true) >= 63)) ||
  fail "silent connections were not closed"
for fd in "${silent[@]}"; do exec {fd}>&-; done

# The real client is still served, unchanged.
# shellcheck disable=SC2046
"$caflm" generate --worker "127.0.0.1:$port" $(tls 2) "${request[@]}" >again.json ||
  fail "not served after the attacks"
[[ $(tokens again.json) == "$(tokens local.json)" ]] || fail "tokens changed after the attacks"

! grep -q "lost the remote engine" serve.err || fail "serve lost its worker: $(cat serve.err)"
curl -sf "$url/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"The quick brown fox","max_tokens":4,"temperature":0}' >completion2.json ||
  fail "serve could not complete after the timeouts: $(cat serve.err)"
answer() { grep -o '"text":"[^"]*"' "$1"; }
[[ $(answer completion.json) == "$(answer completion2.json)" ]] || fail "serve's answer changed"
echo "tls_cluster: all checks passed"
