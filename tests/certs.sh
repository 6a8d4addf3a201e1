#!/usr/bin/env bash
# `caflm certs` writes a PKI that the openssl tool accepts for mutual TLS as
# libcaf_openssl does it (TLS 1.2, ciphers "HIGH:!aNULL:!MD5", both peers
# verified against the CA file): every node certificate verifies against its
# own CA and not against another run's CA, keys match their certificates and
# are private to the owner, the extensions are those of a node, and the
# command refuses to overwrite a PKI without --force.
# Usage: certs.sh CAFLM_BINARY [WORK_DIR]
set -euo pipefail
caflm="$1"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work="${2:-$(mktemp -d)}"
mkdir -p "$work"
cd "$work"
# Only what an earlier run of this script left.
rm -rf pki defaults other partial zero many baddays badhost both

# shellcheck source=support/script_helpers.sh
source "$here/support/script_helpers.sh"
digests() { sha256sum "$1"/* | sort; }
mode() { stat -c %a "$1"; }

nodes=3
"$caflm" certs --out pki --nodes "$nodes" --days 30 --hosts node.example,10.1.2.3,::1 >certs.out
[[ $(wc -l <certs.out) -eq $((2 + 2 * nodes)) ]] || { cat certs.out; fail "expected one line per file"; }

# The CA: self-signed, a CA, signs certificates.
openssl verify -CAfile pki/ca.pem pki/ca.pem >/dev/null || fail "ca.pem is not self-signed"
openssl x509 -in pki/ca.pem -noout -text >ca.txt
grep -q "CA:TRUE" ca.txt || fail "ca.pem lacks CA:TRUE"
grep -A1 "X509v3 Basic Constraints: critical" ca.txt | grep -q "CA:TRUE" ||
  fail "ca.pem's basicConstraints is not critical"
grep -q "Certificate Sign, CRL Sign" ca.txt || fail "ca.pem lacks keyCertSign, cRLSign"
grep -q "Subject: CN = caflm cluster CA [0-9a-f]\+$" ca.txt || fail "ca.pem's subject"
[[ $(mode pki/ca-key.pem) == 600 ]] || fail "ca-key.pem has mode $(mode pki/ca-key.pem)"
[[ $(openssl pkey -in pki/ca-key.pem -pubout) == $(openssl x509 -in pki/ca.pem -noout -pubkey) ]] ||
  fail "ca-key.pem does not match ca.pem"

serials=()
for i in $(seq "$nodes"); do
  cert="pki/node-$i.pem"
  key="pki/node-$i-key.pem"
  [[ $(openssl verify -CAfile pki/ca.pem "$cert") == "$cert: OK" ]] ||
    fail "$cert does not verify against ca.pem"
  # Purpose checks: usable as both TLS server and TLS client.
  openssl verify -CAfile pki/ca.pem -purpose sslserver "$cert" >/dev/null ||
    fail "$cert is not a TLS server certificate"
  openssl verify -CAfile pki/ca.pem -purpose sslclient "$cert" >/dev/null ||
    fail "$cert is not a TLS client certificate"
  [[ $(openssl pkey -in "$key" -pubout) == $(openssl x509 -in "$cert" -noout -pubkey) ]] ||
    fail "$key does not match $cert"
  [[ $(mode "$key") == 600 ]] || fail "$key has mode $(mode "$key")"
  openssl x509 -in "$cert" -noout -text >node.txt
  grep -q "Subject: CN = caflm node $i$" node.txt || fail "$cert's subject"
  grep -q "CA:FALSE" node.txt || fail "$cert lacks CA:FALSE"
  grep -q "TLS Web Server Authentication, TLS Web Client Authentication" node.txt ||
    fail "$cert lacks extendedKeyUsage serverAuth, clientAuth"
  grep -A1 "X509v3 Key Usage: critical" node.txt | grep -q "Digital Signature" ||
    fail "$cert lacks keyUsage digitalSignature"
  grep -q "DNS:node.example, IP Address:10.1.2.3, IP Address:0:0:0:0:0:0:0:1" node.txt ||
    fail "$cert's subjectAltName: $(grep -A1 'Alternative Name' node.txt)"
  grep -q "ASN1 OID: prime256v1" node.txt || fail "$cert's key is not on P-256"
  grep -q "Signature Algorithm: ecdsa-with-SHA256" node.txt || fail "$cert is not signed with SHA-256"
  serial=$(openssl x509 -in "$cert" -noout -serial)
  serials+=("$serial")
done
[[ $(printf '%s\n' "${serials[@]}" | sort -u | wc -l) -eq $nodes ]] || fail "serial numbers repeat"

# Default hosts.
"$caflm" certs --out defaults >/dev/null
[[ -f defaults/node-1.pem && ! -e defaults/node-2.pem ]] || fail "--nodes does not default to 1"
openssl x509 -in defaults/node-1.pem -noout -text |
  grep -q "DNS:localhost, IP Address:127.0.0.1, IP Address:0:0:0:0:0:0:0:1" ||
  fail "default subjectAltName"

# Another run is another CA: it trusts none of the first run's nodes.
"$caflm" certs --out other --nodes 1 >/dev/null
[[ $(openssl x509 -in pki/ca.pem -noout -subject) != $(openssl x509 -in other/ca.pem -noout -subject) ]] ||
  fail "two runs gave CAs with the same subject"
for i in $(seq "$nodes"); do
  must_fail openssl verify -CAfile other/ca.pem "pki/node-$i.pem"
done
must_fail openssl verify -CAfile pki/ca.pem other/node-1.pem

# No overwriting without --force, and nothing written when refused.
before=$(digests pki)
must_fail "$caflm" certs --out pki --nodes "$nodes"
grep -q -- "--force" must_fail.out || fail "the refusal does not mention --force: $(cat must_fail.out)"
[[ $(digests pki) == "$before" ]] || fail "a refused run changed files"
# Any one file of the set already there is enough to refuse.
mkdir partial
echo stale >partial/node-2-key.pem
must_fail "$caflm" certs --out partial --nodes 2
[[ $(ls partial) == node-2-key.pem ]] || fail "a refused run wrote files: $(ls partial)"
# --force replaces the whole set with a new CA.
"$caflm" certs --out pki --nodes "$nodes" --force >/dev/null
[[ $(digests pki) != "$before" ]] || fail "--force did not rewrite the files"
openssl verify -CAfile pki/ca.pem pki/node-1.pem >/dev/null || fail "the rewritten node-1.pem"
[[ $(mode pki/node-1-key.pem) == 600 ]] || fail "a rewritten key has mode $(mode pki/node-1-key.pem)"

# Arguments out of range write nothing.
must_fail "$caflm" certs --out zero --nodes 0
must_fail "$caflm" certs --out many --nodes 1001
must_fail "$caflm" certs --out baddays --days 0
must_fail "$caflm" certs --out badhost --hosts "bad host"
[[ ! -e zero && ! -e many && ! -e baddays && ! -e badhost ]] || fail "a rejected run created --out"

# Mutual TLS as CAF does it: a node serves, another connects, each requires
# and verifies the other's certificate against its CA file. The server (-www:
# it answers one HTTP request with its view of the session, and needs no
# standard input) takes one connection and quits; `timeout` bounds both sides.
server_pid=
stop_server() {
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
  fi
}
trap stop_server EXIT
tls=(-tls1_2 -cipher 'HIGH:!aNULL:!MD5' -verify_return_error)
# start_server DIR NODE CA_DIR: an s_server with DIR's node-NODE
# certificate, trusting CA_DIR's CA, on a free port; sets $port.
start_server() {
  timeout 30 openssl s_server -accept 127.0.0.1:0 -naccept 1 -www -cert "$1/node-$2.pem" \
    -key "$1/node-$2-key.pem" -CAfile "$3/ca.pem" -Verify 1 "${tls[@]}" </dev/null >server.out 2>&1 &
  server_pid=$!
  port=
  for _ in $(seq 100); do
    port=$(sed -n 's/^ACCEPT 127\.0\.0\.1:\([0-9]\+\)$/\1/p' server.out)
    [[ -n $port ]] && return
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  cat server.out >&2
  fail "openssl s_server did not start"
}
# connect DIR NODE CA_DIR: an s_client with DIR's node-NODE certificate,
# trusting CA_DIR's CA, asks the server for its status page.
connect() {
  printf 'GET / HTTP/1.0\r\n\r\n' |
    timeout 20 openssl s_client -connect "127.0.0.1:$port" -ign_eof -cert "$1/node-$2.pem" \
      -key "$1/node-$2-key.pem" -CAfile "$3/ca.pem" -verify 1 "${tls[@]}"
}

start_server pki 1 pki
connect pki 2 pki >client.out 2>&1 || { cat client.out server.out >&2; fail "the mutual TLS handshake failed"; }
stop_server
grep -q "Verify return code: 0 (ok)" client.out || fail "the client did not verify the server"
grep -q "^subject=CN = caflm node 1$" client.out || fail "the client saw another server"
grep -q "Protocol *: TLSv1.2" client.out || fail "not TLS 1.2: $(grep Protocol client.out)"
# The server verified node 2's certificate and says so in its status page.
grep -A1 "depth=0 CN = caflm node 2" server.out | grep -q "verify return:1" ||
  { cat server.out >&2; fail "the server did not verify the client's certificate"; }
grep -A12 "^Client certificate" client.out | grep -q "Subject: CN=caflm node 2" ||
  fail "the server did not receive the client's certificate"

# A client whose certificate comes from another CA is turned away by the
# server, and a server from another CA by the client (the other side trusts
# both here, so the refusal is the one under test).
cat pki/ca.pem other/ca.pem >both-cas.pem
mkdir -p both
cp both-cas.pem both/ca.pem
start_server pki 1 pki
must_fail connect other 1 both
stop_server
grep -q "tls_process_client_certificate:certificate verify failed" server.out || { cat server.out must_fail.out >&2; fail "the server did not refuse the client"; }
start_server other 1 both
must_fail connect pki 2 pki
stop_server
grep -q "tls_post_process_server_certificate:certificate verify failed" must_fail.out || { cat must_fail.out >&2; fail "the client did not refuse the server"; }
echo "certs: all checks passed"
