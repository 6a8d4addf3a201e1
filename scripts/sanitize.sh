#!/usr/bin/env bash
# Builds caflm and its whole test suite with AddressSanitizer and
# UndefinedBehaviorSanitizer, then runs every test. Any report that is not
# suppressed ends the process it happens in (halt_on_error), which fails its
# test, so a green ctest means no finding in the code that ran.
#
# Usage: scripts/sanitize.sh [--build DIR] [--jobs N] [--tests REGEX] [-- CTEST_ARGS...]
#
# --tests builds and runs only the tests whose names match REGEX (and the
# caflm binary); without it, everything.
# The CUDA backend and the benchmarks are left out: nvcc's host code and
# Google Benchmark's timing loops add nothing for the sanitizers to find.
# Warnings are not errors here: instrumented code makes GCC 12 warn of
# uninitialized values inside Boost.Beast and CAF headers that the normal
# build (which keeps -Werror) does not see.
# CAF 0.17 (Debian's libcaf) is not instrumented; its headers' templates are,
# where caflm instantiates them. Known upstream reports are suppressed in
# scripts/sanitize-suppressions/, each with its reason.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-asan"
jobs=2
tests=
while (($#)); do
  case $1 in
  --build) build=$2; shift 2 ;;
  --jobs) jobs=$2; shift 2 ;;
  --tests) tests=$2; shift 2 ;;
  --) shift; break ;;
  *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

# UBSan's checks stay recoverable, the only way its suppressions apply;
# halt_on_error below still ends the process at the first unsuppressed one.
flags="-fsanitize=address,undefined -fno-omit-frame-pointer"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCAFLM_ENABLE_CUDA=OFF -DCAFLM_BUILD_BENCHMARKS=OFF -DCAFLM_WERROR=OFF -DCAFLM_USE_JEMALLOC=OFF
# shellcheck source=support/build_tests.sh
source "$root/scripts/support/build_tests.sh"
build_tests "$build" "$jobs" "$tests"
ctest_selection=()
[[ -z $tests ]] || ctest_selection=(-R "$tests")

suppressions="$root/scripts/sanitize-suppressions"
# Processes the tests start (caflm worker, serve...) inherit these.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:suppressions=$suppressions/asan.supp"
export LSAN_OPTIONS="suppressions=$suppressions/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$suppressions/ubsan.supp"
# The soak judges no RSS trend under ASan (its quarantine grows by design).
export CAFLM_SANITIZERS=address,undefined
# Browser and script tests scale their waits by this: the model runs
# several times slower instrumented.
export CAFLM_TEST_TIME_SCALE=10
# OpenMP's worker threads stay parked at exit; LSan sees nothing of them.
export OMP_NUM_THREADS=2
ctest --test-dir "$build" -j "$jobs" --timeout 1800 --output-on-failure "${ctest_selection[@]}" "$@"
