#!/usr/bin/env bash
# Runs caflm's tests under ThreadSanitizer with every library that
# synchronizes caflm's threads instrumented too, so that what TSan reports is
# real. Against Debian's binary libcaf_core and GCC's libgomp, TSan cannot see
# their synchronization and reports hundreds of false races; here instead:
# - CAF 0.17.6 is built with -fsanitize=thread from Debian's own source
#   package (`apt-get source actor-framework` through a private deb-src list,
#   so no root is needed), and installed under the work directory;
# - the CPU kernels' OpenMP runs on LLVM's libomp (clang's -fopenmp) with
#   LLVM's TSan annotations for it loaded (libarcher, libomp-14-dev);
# - caflm itself is built with clang -fsanitize=thread against both.
# libstdc++, OpenSSL and fmt stay as Debian ships them: their threads meet
# through pthreads, which TSan intercepts.
#
# Usage: scripts/tsan.sh [--work DIR] [--jobs N] [--tests REGEX] [-- CTEST_ARGS...]
#
# --tests builds and runs only the tests whose names match REGEX (and the
# caflm binary); without it, everything. DIR (default build-tsan) holds
# CAF's source, build and install, caflm's build, and tsan-reports/ (one
# file per process that reported). Prints each distinct report's summary
# line with how often it came, then ctest's result; exits 1 if TSan
# reported anything or a test failed. Needs clang and
# libomp-dev (apt-get install clang libomp-dev dpkg-dev) and Debian's source
# archive (deb.debian.org).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$root/build-tsan"
jobs=2
tests=
while (($#)); do
  case $1 in
  --work) work=$(realpath -m "$2"); shift 2 ;;
  --jobs) jobs=$2; shift 2 ;;
  --tests) tests=$2; shift 2 ;;
  --) shift; break ;;
  -h | --help) sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "tsan.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
archer=$(find /usr/lib/llvm-*/lib -name libarcher.so 2>/dev/null | sort -V | tail -n 1)
for tool in clang clang++ dpkg-source; do
  command -v "$tool" >/dev/null || { echo "tsan.sh: needs $tool (apt-get install clang libomp-dev dpkg-dev)" >&2; exit 2; }
done
[[ -n $archer ]] || { echo "tsan.sh: no libarcher.so (apt-get install libomp-dev)" >&2; exit 2; }
mkdir -p "$work"

# -- CAF from Debian's source package ---------------------------------------------
# The revision Debian built the installed libcaf-dev from, and its upstream.
source_version=$(dpkg-query -W -f='${source:Version}' libcaf-dev)
caf_version=${source_version%-*}
caf_source="$work/caf-source"
if [[ ! -f $caf_source/CMakeLists.txt ]]; then
  apt_dir="$work/apt"
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$work/download"
  echo "deb-src http://deb.debian.org/debian bookworm main" >"$apt_dir/sources.list"
  apt_options=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/nonexistent
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o Debug::NoLocking=1
    -o APT::Sandbox::User=root)
  apt-get "${apt_options[@]}" update >/dev/null
  (cd "$work/download" && apt-get "${apt_options[@]}" source --download-only "actor-framework=$source_version") ||
    echo "tsan.sh: not every file of the source package came; using what did"
  dsc="$work/download/actor-framework_$source_version.dsc"
  [[ -f $dsc ]] || { echo "tsan.sh: Debian's source archive gave no actor-framework $source_version" >&2; exit 1; }
  rm -rf "$caf_source"
  if dpkg-source -x "$dsc" "$caf_source" >/dev/null 2>&1; then
    echo "tsan.sh: CAF from $(basename "$dsc"), Debian's patches applied"
  else
    # The archive sometimes lacks the Debian tarball of an older revision:
    # build the upstream tarball, once its checksum matches the .dsc's.
    orig="$work/download/actor-framework_$caf_version.orig.tar.gz"
    want=$(awk -v f="$(basename "$orig")" '/^Checksums-Sha256:/ {s = 1; next} s && $3 == f {print $1; exit}' "$dsc")
    [[ -n $want && $(sha256sum "$orig" | cut -d' ' -f1) == "$want" ]] ||
      { echo "tsan.sh: $orig is missing or does not match $dsc" >&2; exit 1; }
    mkdir -p "$caf_source"
    tar -xzf "$orig" -C "$caf_source" --strip-components=1
    # Debian's patches show in the headers libcaf-dev installed (0.17.6-2.1
    # adds a missing #include <limits> that clang needs): take those.
    patched=0
    while IFS= read -r header; do
      for library in libcaf_core libcaf_io libcaf_openssl; do
        if [[ -f $caf_source/$library/$header ]] && ! cmp -s "/usr/include/$header" "$caf_source/$library/$header"; then
          cp "/usr/include/$header" "$caf_source/$library/$header"
          patched=$((patched + 1))
        fi
      done
    done < <(cd /usr/include && find caf -name '*.hpp')
    echo "tsan.sh: CAF from $(basename "$orig") (checksum as in $(basename "$dsc")); Debian's" \
      "patch tarball was not available, so $patched header(s) come from the installed libcaf-dev"
  fi
fi
caf_prefix="$work/caf"
if [[ ! -f $caf_prefix/include/caf/all.hpp ]]; then
  # CAF_NO_AUTO_LIBCPP keeps clang on libstdc++, the ABI caflm links with.
  cmake -S "$caf_source" -B "$work/caf-build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS="-std=c++11 -fsanitize=thread" \
    -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread -DCMAKE_INSTALL_PREFIX="$caf_prefix" \
    -DCAF_NO_AUTO_LIBCPP=yes -DCAF_NO_EXAMPLES=yes -DCAF_NO_UNIT_TESTS=yes -DCAF_NO_TOOLS=yes \
    -DCAF_NO_PYTHON=yes -DCAF_NO_OPENCL=yes -DCAF_NO_SUMMARY=yes >/dev/null
  cmake --build "$work/caf-build" -j "$jobs"
  cmake --install "$work/caf-build" >/dev/null
fi

# -- caflm ------------------------------------------------------------------------
# CMAKE_PREFIX_PATH puts this CAF before Debian's; CMake's build RPATH keeps
# the tests and the caflm binary on it at run time.
cmake -S "$root" -B "$work/caflm-build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_PREFIX_PATH="$caf_prefix" \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread" -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread \
  -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread \
  -DCAFLM_ENABLE_CUDA=OFF -DCAFLM_BUILD_BENCHMARKS=OFF -DCAFLM_USE_JEMALLOC=OFF >/dev/null
grep -q "CAF_CORE_LIBRARY:FILEPATH=$caf_prefix/" "$work/caflm-build/CMakeCache.txt" ||
  { echo "tsan.sh: caflm's build did not pick up the instrumented CAF in $caf_prefix" >&2; exit 1; }
# shellcheck source=support/build_tests.sh
source "$root/scripts/support/build_tests.sh"
build_tests "$work/caflm-build" "$jobs" "$tests"
ctest_selection=()
[[ -z $tests ]] || ctest_selection=(-R "$tests")

# -- run --------------------------------------------------------------------------
reports="$work/tsan-reports"
rm -rf "$reports"
mkdir -p "$reports"
# Processes the tests start (caflm worker, serve...) inherit these. TSan
# reports go to files, so that a test that checks a child's stderr is not
# disturbed, and do not stop the process: one run reports everything.
# ignore_noninstrumented_modules keeps TSan out of libomp's own insides,
# as libarcher asks: what OpenMP synchronizes, libarcher tells TSan.
export TSAN_OPTIONS="log_path=$reports/report ignore_noninstrumented_modules=1 second_deadlock_stack=1 history_size=4 halt_on_error=0 exitcode=0 suppressions=$root/scripts/sanitize-suppressions/tsan.supp"
export OMP_TOOL_LIBRARIES="$archer"
export OMP_NUM_THREADS=2
set +e
ctest --test-dir "$work/caflm-build" -j "$jobs" --timeout 3600 --output-on-failure \
  "${ctest_selection[@]}" "$@"
ctest_status=$?
set -e

echo
echo "== ThreadSanitizer reports (files in $reports)"
shopt -s nullglob
report_files=("$reports"/report.*)
if ((${#report_files[@]} == 0)); then
  echo "none"
else
  grep -h "^SUMMARY: ThreadSanitizer" "${report_files[@]}" | sort | uniq -c | sort -rn
fi
echo "ctest: exit $ctest_status"
((${#report_files[@]} == 0 && ctest_status == 0))
