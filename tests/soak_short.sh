#!/usr/bin/env bash
# A CI-sized run of scripts/soak.sh: two minutes of mixed load on a
# three-worker TLS cluster while workers are killed and stopped; fails on an
# altered or lost request, a failure without a fault, a worker that does not
# come back, KV blocks not returned, or a leak (see scripts/soak.sh).
# Usage: soak_short.sh CAFLM_BINARY WORK_DIR
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec bash "$here/../scripts/soak.sh" --minutes 2 --caflm "$1" --out "$2" --seed 7
