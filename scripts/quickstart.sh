#!/usr/bin/env bash
# Sets up, builds and runs caflm on a fresh Debian 12 machine (as root, or
# with sudo available): `scripts/quickstart.sh demo` runs the multi-process
# failover demo, `scripts/quickstart.sh test` runs every test with ctest.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CAFLM_BUILD_DIR:-$here/build}"

packages=(
  build-essential cmake ninja-build pkg-config
  libcaf-dev catch2 libfmt-dev nlohmann-json3-dev libcpp-httplib-dev libboost-dev zlib1g-dev
  libopenblas-dev libcli11-dev libxxhash-dev libbenchmark-dev python3 unicode-data
  libssl-dev openssl curl libjemalloc-dev
)

install_missing_packages() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "installing: ${missing[*]}"
    local sudo=""
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}

configure_and_build() {
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}"
  # CAF translation units take about 600 MB each; two jobs fit two cores.
  cmake --build "$build" -j "${CAFLM_JOBS:-2}" "$@"
}

case "${1:-}" in
  demo)
    install_missing_packages
    configure_and_build --target caflm multi_process_demo
    "$build/examples/multi_process_demo"
    ;;
  test)
    install_missing_packages
    configure_and_build
    ctest --test-dir "$build" --output-on-failure -j 2
    ;;
  *)
    echo "usage: $0 demo|test" >&2
    exit 2
    ;;
esac
