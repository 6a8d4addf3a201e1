# Sourced by the sanitizer scripts. build_tests BUILD_DIR JOBS [REGEX]
# builds what the tests named by REGEX need (their executables and the caflm
# binary that script tests run), or everything without REGEX.
# shellcheck shell=bash
build_tests() {
  local build=$1 jobs=$2 regex=${3:-}
  if [[ -z $regex ]]; then
    cmake --build "$build" -j "$jobs"
    return
  fi
  local selected name targets=(caflm)
  mapfile -t selected < <(ctest --test-dir "$build" -N -R "$regex" | sed -n 's/^ *Test *#[0-9]*: //p')
  if ((${#selected[@]} == 0)); then
    echo "no test matches '$regex'" >&2
    return 2
  fi
  for name in "${selected[@]}"; do
    ninja -C "$build" -t query "$name" >/dev/null 2>&1 && targets+=("$name")
  done
  cmake --build "$build" -j "$jobs" --target "${targets[@]}"
}
