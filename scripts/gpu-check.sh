#!/usr/bin/env bash
# Checks caflm's CUDA backend on a machine with an NVIDIA GPU (written for one
# H200), offline, in about 8 minutes at most, from the repository root:
#
#   scripts/gpu-check.sh                  # build, GPU tests, 1.1B BF16 bench, summary
#   scripts/gpu-check.sh --build-only     # configure and build only
#   scripts/gpu-check.sh --pack FILE      # build, then pack what a GPU machine runs
#   scripts/gpu-check.sh --prebuilt FILE  # on the GPU machine: tests and bench of a pack
#
# --pack and --prebuilt are for a GPU machine without caflm's Debian
# libraries or compiler (as this project's lent H200 is): --pack builds here
# and writes FILE, a .tar.xz of the caflm command, the GPU tests, every
# shared library they link but the C library's own and the driver (the C++
# runtime apart, used only where the machine's own is older), and the test
# data; --prebuilt FILE unpacks it and runs steps (b) to (f) below with no
# build, naming the test data and binary to the tests by CAFLM_TESTDATA_DIR
# and CAFLM_BINARY.
#
# (a) configures a Release build with CUDA in build-gpu (reused when run
#     again) and builds the caflm command, bench_cuda_linear and every test
#     registered in tests/cuda/ (CTest label `gpu`); (b) runs those tests: a
#     failure, or a "skipped:" warning (a GPU test that found no device),
#     fails the check; (c) writes a random 1.1B-parameter llama model in BF16
#     (TinyLlama's shape) with `caflm make-test-model`; (d) runs `caflm bench
#     --device cuda` at B = 1, 32, 128, 256, then at B = 1 and 32 with graphs
#     off and with programmatic launches on, and bench_cuda_linear (the
#     step's linear layers alone; these three informational); (e) compares
#     B=1 decode against the HBM roofline
#     and B=256 decode against B=1; (f) prints one summary table and exits
#     non-zero if anything failed.
#
# Needs cmake, ninja, a C++ compiler, nvcc (PATH or /usr/local/cuda/bin) and
# caflm's Debian libraries (CAF, fmt, CLI11, nlohmann-json, xxhash, Catch2);
# installs nothing. Environment:
#   CAFLM_GPU_BUILD_DIR  build folder (default: build-gpu)
#   CAFLM_JOBS           build jobs (default: nproc)
#   CAFLM_TESTDATA_DIR   reference data (default: ../shared/testdata, else
#                        shared/testdata in the checkout); some GPU tests read
#                        its models/, and its vocab/ggml-vocab-llama-spm.gguf
#                        gives the model its 32000-token vocabulary (without
#                        it: make-test-model's small built-in one)
#   CAFLM_GPU_CHECK_BUDGET_S  wall-clock budget of all steps (default 470)
#   CAFLM_HBM_BYTES_PER_S     the roofline's bandwidth (default 4.8e12, H200)
#   CAFLM_GPU_CHECK_KEEP      when set, keep the logs and the model (the
#                             temporary folder is named at the end)
set -euo pipefail

readonly ROOFLINE_TARGET=0.60 # B=1 decode: fraction of the HBM roofline
readonly SCALING_TARGET=10    # B=256 decode tok/s over B=1's
readonly CONCURRENCY=(1 32 128 256)
readonly PROMPT_TOKENS=128
readonly GEN_TOKENS=64
# TinyLlama-1.1B's shape.
readonly MODEL_ARGS=(--arch llama --dim 2048 --layers 22 --heads 32 --kv-heads 4 --ffn 5632
  --type bf16 --seed 1)

# Globals: the budget's end (in $SECONDS), the background model writer, the table.
deadline=0
model_pid=""
summary_file=""

log() { printf '[%s +%3ds] %s\n' "$(date -u +%H:%M:%S)" "$SECONDS" "$*"; }

# Rows of the summary table: check, value, target, result (tab-separated).
add_row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$summary_file"; }

print_summary() {
  echo
  echo "== caflm GPU check summary =="
  awk -F'\t' '
    { rows[NR] = $0; for (i = 1; i <= 4; ++i) if (length($i) > w[i]) w[i] = length($i) }
    END {
      fmt = "%-" w[1] "s  %-" w[2] "s  %-" w[3] "s  %s\n"
      printf fmt, "check", "value", "target", "result"
      for (r = 1; r <= NR; ++r) { split(rows[r], f, "\t"); printf fmt, f[1], f[2], f[3], f[4] }
    }' "$summary_file"
}

# Seconds left of the budget for a step, at most `cap`, keeping `reserve`
# seconds for the steps after it; 0 when too little is left to start it.
step_timeout() {
  local cap=$1 reserve=${2:-0} left
  left=$((deadline - SECONDS - reserve))
  ((left > cap)) && left=$cap
  ((left >= 10)) || left=0
  echo "$left"
}

# The reason of the first "skipped: <reason>" warning in a test's `ctest -V`
# output ("N: " before each line), with the lines Catch2 wrapped it onto.
first_skip_reason() {
  awk '{ sub(/^[0-9]+: /, "") }
    on && /^ *$/ { exit }
    on { sub(/^ +/, ""); reason = reason " " $0; next }
    /skipped: / { on = 1; reason = substr($0, index($0, "skipped: ") + 9) }
    END { if (reason != "") print reason }' "$1"
}

# The "tensor_bytes" and the token count of `caflm inspect --json`'s output
# (one key per line, as it prints them), as "TENSOR_BYTES VOCAB".
inspect_sizes() {
  awk '
    /^  "tensor_bytes": / { gsub(/[^0-9]/, "", $2); bytes = $2 }
    /"tokenizer\.ggml\.tokens": \{/ { in_tokens = 1; next }
    in_tokens && /"length": / { gsub(/[^0-9]/, "", $2); vocab = $2; in_tokens = 0 }
    END { if (bytes != "" && vocab != "") print bytes, vocab }' "$1"
}

# The bench's JSON report (its last line that starts with '{'): its results as lines
# "CONCURRENCY PREFILL_TOK_S DECODE_TOK_S"; a missing or null rate prints as nan.
bench_rows() {
  { grep '^{' "$1" || true; } | tail -n 1 | sed 's/.*"results"://' | tr '{' '\n' | awk '
    function field(name,   rest) {
      if (!match($0, "\"" name "\":[^,}]*")) return "nan"
      rest = substr($0, RSTART + length(name) + 3, RLENGTH - length(name) - 3)
      return rest ~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/ ? rest : "nan"
    }
    /"concurrency"/ { print field("concurrency"), field("prefill_tok_s"), field("decode_tok_s") }'
}

# Appends the bench rows, the roofline and the scaling rows to the summary.
# $1: bench output, $2: inspect output (may be missing), $3: bandwidth B/s.
judge_bench() {
  local bench_out=$1 inspect_out=$2 bandwidth=$3 rows sizes=""
  rows=$(bench_rows "$bench_out")
  [[ -f $inspect_out ]] && sizes=$(inspect_sizes "$inspect_out")
  # Decode rows first, then prefill rows, each in CONCURRENCY's order.
  awk -v sizes_wanted="${CONCURRENCY[*]}" -v rows="$rows" 'BEGIN {
    n = split(rows, lines, "\n")
    for (i = 1; i <= n; ++i) { split(lines[i], f, " "); prefill[f[1]] = f[2]; decode[f[1]] = f[3] }
    m = split(sizes_wanted, wanted, " ")
    for (pass = 1; pass <= 2; ++pass)
      for (j = 1; j <= m; ++j) {
        b = wanted[j]; rate = pass == 1 ? decode[b] : prefill[b]
        ok = rate != "" && rate != "nan" && rate + 0 > 0
        printf "%s tok/s B=%s\t%s\tmeasured, > 0\t%s\n", pass == 1 ? "decode" : "prefill", b,
          ok ? sprintf("%.1f", rate) : "none", ok ? "PASS" : "FAIL"
      }
  }' >>"$summary_file"
  # Bytes read per decoded token at B=1: every tensor the forward pass reads
  # (all layers' matrices and norms, the output norm and output.weight) once,
  # and of the token embedding only the one row gathered. From the file's
  # tensor bytes (caflm inspect), less the embedding (vocab x dim BF16) and
  # plus one row of it. The KV cache read (22 layers x <= 193 positions x
  # 2 x 256 F32 values, under 9 MB) is left out: well under 1% of ~2 GB.
  awk -v rows="$rows" -v sizes="$sizes" -v dim=2048 -v bw="$bandwidth" \
    -v roof_target="$ROOFLINE_TARGET" -v scale_target="$SCALING_TARGET" 'BEGIN {
      n = split(rows, lines, "\n"); d1 = "nan"; d256 = "nan"
      for (i = 1; i <= n; ++i) {
        split(lines[i], f, " ")
        if (f[1] == 1) d1 = f[3]
        if (f[1] == 256) d256 = f[3]
      }
      have1 = d1 != "nan" && d1 + 0 > 0
      if (have1 && split(sizes, s, " ") == 2) {
        per_token = s[1] - s[2] * dim * 2 + dim * 2
        fraction = per_token * d1 / bw
        printf "HBM roofline at B=1\t%.1f%% (%.3f GB/token, %.0f GB/s)\t>= %d%%\t%s\n",
          100 * fraction, per_token / 1e9, per_token * d1 / 1e9, 100 * roof_target,
          (fraction >= roof_target) ? "PASS" : "FAIL"
      } else
        printf "HBM roofline at B=1\tnone\t>= %d%%\tFAIL\n", 100 * roof_target
      if (have1 && d256 != "nan") {
        ratio = d256 / d1
        printf "decode B=256 / B=1\t%.1fx\t>= %dx\t%s\n", ratio, scale_target,
          (ratio >= scale_target) ? "PASS" : "FAIL"
      } else
        printf "decode B=256 / B=1\tnone\t>= %dx\tFAIL\n", scale_target
    }' >>"$summary_file"
}

# Writes the pack of --pack (see the top) to $1 from build $2, tests $4...,
# test data $3 (may be empty).
write_pack() {
  local file=$1 build=$2 testdata=$3 stage="$work/pack" lib name
  shift 3
  mkdir -p "$stage/bin" "$stage/lib" "$stage/fallback" "$stage/testdata"
  cp "$build/apps/caflm" "$build/bench/bench_cuda_linear" "$stage/bin/"
  for name in "$@"; do cp "$build/tests/cuda/$name" "$stage/bin/"; done
  if command -v strip >/dev/null; then strip --strip-unneeded "$stage"/bin/*; fi
  while read -r lib; do
    case "$(basename "$lib")" in
      ld-linux* | libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | libgcc_s.so* | libcuda.so*) ;;
      libstdc++.so*) cp -L "$lib" "$stage/fallback/" ;;
      *) cp -L "$lib" "$stage/lib/" ;;
    esac
  done < <(ldd "$stage"/bin/* | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u)
  if [[ -n $testdata ]]; then cp -r "$testdata/models" "$testdata/vocab" "$stage/testdata/"; fi
  mkdir -p "$(dirname "$file")"
  tar -C "$stage" -cJf "$file" .
}

main() {
  local build_only=0 pack_file="" prebuilt_file=""
  case "${1:-}" in
    "") ;;
    --build-only) build_only=1 ;;
    --pack | --prebuilt)
      if [[ -z ${2:-} ]]; then
        echo "usage: $0 $1 FILE" >&2
        exit 2
      fi
      [[ $1 == --pack ]] && pack_file=$2 || prebuilt_file=$2
      ;;
    *)
      echo "usage: $0 [--build-only | --pack FILE | --prebuilt FILE]" >&2
      exit 2
      ;;
  esac
  local root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  local build="${CAFLM_GPU_BUILD_DIR:-$root/build-gpu}"
  [[ $build == /* ]] || build="$root/$build"
  # Reference data: ../shared/testdata as the tests expect, else a shared/
  # folder inside the checkout (which travels where ../shared does not).
  local testdata="${CAFLM_TESTDATA_DIR:-}" testdata_arg=()
  if [[ -z $testdata ]]; then
    local candidate
    for candidate in "$root/../shared/testdata" "$root/shared/testdata"; do
      if [[ -d $candidate ]]; then
        testdata=$candidate
        break
      fi
    done
  fi
  [[ -n $testdata && $testdata != "$root/../shared/testdata" ]] &&
    testdata_arg=(-DCAFLM_TESTDATA_DIR="$(cd "$testdata" && pwd)")
  local jobs="${CAFLM_JOBS:-$(nproc)}"
  local bandwidth="${CAFLM_HBM_BYTES_PER_S:-4.8e12}"
  deadline=$((SECONDS + ${CAFLM_GPU_CHECK_BUDGET_S:-470}))
  # Packing builds on a development machine, where the build may take long.
  [[ -n $pack_file ]] && deadline=$((SECONDS + 7200))

  local work
  work="$(mktemp -d "${TMPDIR:-/tmp}/caflm-gpu-check.XXXXXX")"
  summary_file="$work/summary.tsv"
  : >"$summary_file"
  local cleanup="rm -rf '$work'"
  [[ -n ${CAFLM_GPU_CHECK_KEEP:-} ]] && cleanup="echo 'logs and model kept in $work'"
  # shellcheck disable=SC2064 # $cleanup is fixed from here on; $model_pid is read at exit
  trap "if [[ -n \$model_pid ]]; then kill \$model_pid 2>/dev/null || true; fi; $cleanup" EXIT
  local failed=0
  finish() {
    add_row "total wall time" "${SECONDS} s" "<= 480 s" "$( ((SECONDS <= 480)) && echo info || echo SLOW)"
    print_summary
    local what="GPU check"
    ((build_only)) && what="GPU check (--build-only)"
    [[ -n $pack_file ]] && what="GPU check (--pack)"
    if ((failed)); then
      echo "$what: FAILED"
      exit 1
    fi
    echo "$what: PASSED"
    exit 0
  }

  local tests=() caflm="" linear_bench="" t status name
  if [[ -n $prebuilt_file ]]; then
    # -- (a) the pack: no build ------------------------------------------------------
    local pack="$work/pack"
    mkdir -p "$pack"
    if ! tar -C "$pack" -xJf "$prebuilt_file" 2>"$work/unpack.log"; then
      cat "$work/unpack.log"
      add_row "pack" "cannot unpack $prebuilt_file" "unpacks" FAIL
      failed=1
      finish
    fi
    caflm="$pack/bin/caflm"
    linear_bench="$pack/bin/bench_cuda_linear"
    export LD_LIBRARY_PATH="$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if ! "$caflm" --help >/dev/null 2>&1; then
      LD_LIBRARY_PATH+=":$pack/fallback" # the machine's C++ runtime is older
    fi
    if ! "$caflm" --help >/dev/null 2>"$work/start.log"; then
      cat "$work/start.log"
      add_row "pack" "caflm does not start here" "starts" FAIL
      failed=1
      finish
    fi
    testdata="$pack/testdata"
    [[ -d $testdata/models ]] || testdata=""
    export CAFLM_TESTDATA_DIR="$testdata" CAFLM_BINARY="$caflm"
    for name in "$pack"/bin/test_cuda_*; do
      [[ -e $name ]] && tests+=("$(basename "$name")")
    done
    add_row "pack" "$prebuilt_file: ${#tests[@]} GPU tests" "unpacks, starts" PASS
  else
    # -- tools -----------------------------------------------------------------
    local missing=() nvcc=""
    command -v cmake >/dev/null || missing+=(cmake)
    command -v ninja >/dev/null || missing+=(ninja)
    command -v c++ >/dev/null || command -v g++ >/dev/null || missing+=("a C++ compiler (c++/g++)")
    if command -v nvcc >/dev/null; then
      nvcc="$(command -v nvcc)"
    elif [[ -x /usr/local/cuda/bin/nvcc ]]; then
      nvcc=/usr/local/cuda/bin/nvcc
    else
      missing+=("nvcc (CUDA toolkit: PATH or /usr/local/cuda/bin)")
    fi
    if ((${#missing[@]})); then
      log "missing: ${missing[*]} (this script installs nothing; no network assumed)"
      add_row "tools" "missing: ${missing[*]}" "cmake, ninja, c++, nvcc" FAIL
      failed=1
      finish
    fi
    log "tools: $(cmake --version | head -n 1), ninja $(ninja --version), nvcc $("$nvcc" --version | sed -n 's/.*release \([^,]*\).*/\1/p')"

    # -- (a) configure and build --------------------------------------------------
    local launcher=()
    command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
    if [[ -n $testdata ]]; then
      log "test data: $testdata"
    else
      log "warning: no test data (../shared/testdata, shared/testdata or CAFLM_TESTDATA_DIR):" \
        "tests that read it fail, and the model gets a small vocabulary"
    fi
    t=$(step_timeout 120 300)
    log "configure $build (Release, timeout ${t}s)"
    if ! timeout "$t" cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      "${launcher[@]}" "${testdata_arg[@]}" >"$work/configure.log" 2>&1; then
      tail -n 30 "$work/configure.log"
      grep -E "Could NOT find|Could not find" "$work/configure.log" | sed 's/^/  missing? /' || true
      add_row "configure" "cmake failed (see above)" "configures" FAIL
      failed=1
      finish
    fi
    grep -E '^-- caflm:' "$work/configure.log" || true
    if ! grep -q 'caflm: CUDA backend on' "$work/configure.log"; then
      add_row "configure" "$(grep -o 'CUDA backend off.*' "$work/configure.log" | head -n 1)" "CUDA backend on" FAIL
      failed=1
      finish
    fi
    add_row "configure" "CUDA backend on, architectures $(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build/CMakeCache.txt")" "CUDA backend on" PASS

    mapfile -t tests < <(ctest --test-dir "$build" -N -L gpu | sed -n 's/^ *Test *#[0-9]*: *//p')
    if ((${#tests[@]} == 0)); then # a tree without the label: tests/cuda's names
      mapfile -t tests < <(ctest --test-dir "$build" -N -R '^test_cuda_' | sed -n 's/^ *Test *#[0-9]*: *//p')
    fi
    log "GPU tests registered: ${tests[*]:-none}"

    t=$(step_timeout 3600 120)
    log "build caflm and ${#tests[@]} GPU tests, -j$jobs (timeout ${t}s)"
    local build_start=$SECONDS
    status=0
    timeout "$t" cmake --build "$build" -j "$jobs" --target caflm bench_cuda_linear "${tests[@]}" \
      >"$work/build.log" 2>&1 ||
      status=$?
    if ((status != 0)); then
      # The first failing commands' messages (ninja stops after the first).
      grep -E '^FAILED:|error:|undefined reference|ninja: build stopped' "$work/build.log" | cut -c 1-300 |
        head -n 40 || true
      tail -n 5 "$work/build.log"
      add_row "build" "$( ((status == 124)) && echo "timed out" || echo failed) after $((SECONDS - build_start)) s" \
        "builds" FAIL
      failed=1
      finish
    fi
    add_row "build" "$((SECONDS - build_start)) s" "builds" PASS
    log "build done in $((SECONDS - build_start)) s"
    if [[ -n $pack_file ]]; then
      log "pack $pack_file"
      if write_pack "$pack_file" "$build" "$testdata" "${tests[@]}" >"$work/pack.log" 2>&1; then
        add_row "pack" "$pack_file, $(($(stat -c %s "$pack_file") / 1000000)) MB" "written" PASS
      else
        tail -n 20 "$work/pack.log"
        add_row "pack" "failed" "written" FAIL
        failed=1
      fi
      finish
    fi
    if ((build_only)); then
      finish
    fi
    caflm="$build/apps/caflm"
    linear_bench="$build/bench/bench_cuda_linear"
  fi
  if ((${#tests[@]} == 0)); then
    add_row "GPU tests" "none registered" ">= 1" FAIL
    failed=1
  fi

  local model="$work/tinyllama-1.1b-bf16.gguf"
  local vocab_args=() vocab_note="make-test-model's built-in vocab, not 32000 tokens"
  if [[ -n $testdata && -f $testdata/vocab/ggml-vocab-llama-spm.gguf ]]; then
    vocab_args=(--vocab "$testdata/vocab/ggml-vocab-llama-spm.gguf")
    vocab_note="32000-token vocab"
  fi

  # With a GPU known to be there, the model is written (on the CPU) while the
  # GPU tests run.
  local gpu_reason="" smi_gpus=""
  if command -v nvidia-smi >/dev/null; then
    smi_gpus="$(timeout 20 nvidia-smi -L 2>&1 | grep '^GPU' || true)"
    [[ -n $smi_gpus ]] || gpu_reason="nvidia-smi lists no GPU: $(timeout 20 nvidia-smi -L 2>&1 | head -n 1 || true)"
  fi
  [[ -n $smi_gpus ]] && log "GPUs: $smi_gpus"
  start_model() {
    local tm
    tm=$(step_timeout 150 90)
    log "write the 1.1B BF16 model ($vocab_note, timeout ${tm}s)"
    if ((tm == 0)); then return 1; fi
    timeout "$tm" "$caflm" make-test-model --out "$model" "${MODEL_ARGS[@]}" "${vocab_args[@]}" \
      >"$work/model.log" 2>&1 &
    model_pid=$!
  }
  if [[ -n $smi_gpus ]]; then start_model || true; fi

  # -- (b) the GPU tests ------------------------------------------------------------
  local out skip_reason first_skip="" tests_run=0
  for name in "${tests[@]}"; do
    t=$(step_timeout 90 100)
    out="$work/$name.log"
    status=0
    if ((t == 0)); then
      add_row "$name" "not run (time budget)" "pass, no skip" FAIL
      failed=1
      continue
    fi
    tests_run=$((tests_run + 1))
    if [[ -n $prebuilt_file ]]; then
      timeout "$t" "$pack/bin/$name" >"$out" 2>&1 || status=$?
    else
      timeout "$t" ctest --test-dir "$build" -R "^${name}\$" -V --timeout "$t" >"$out" 2>&1 || status=$?
    fi
    skip_reason="$(first_skip_reason "$out")"
    [[ -n $skip_reason && -z $first_skip ]] && first_skip="$skip_reason"
    # ctest's verdict line, or (a pack's test run directly) the exit status alone.
    if ((status != 0)) || { [[ -z $prebuilt_file ]] && ! grep -q '100% tests passed' "$out"; }; then
      grep -v '^[0-9]*: *$' "$out" | tail -n 40
      add_row "$name" "fail" "pass, no skip" FAIL
      failed=1
    elif [[ -n $skip_reason ]]; then
      add_row "$name" "skip ($skip_reason)" "pass, no skip" FAIL
      failed=1
    else
      add_row "$name" "pass" "pass, no skip" PASS
    fi
    log "$name: $(tail -n 1 "$summary_file" | cut -f 2)"
  done
  if [[ -z $smi_gpus ]]; then
    # No nvidia-smi, or it saw no GPU: the tests' own probe decides.
    if [[ -n $first_skip ]]; then
      gpu_reason="$first_skip"
    elif [[ -z $gpu_reason ]] && ((tests_run > 0)); then
      log "nvidia-smi not found, but the GPU tests found a device"
    elif [[ -z $gpu_reason ]]; then
      gpu_reason="nvidia-smi not found and no GPU test ran"
    fi
  fi
  if [[ -n $gpu_reason ]]; then
    log "no GPU: $gpu_reason"
    add_row "GPU" "no GPU: $gpu_reason" "one CUDA device" FAIL
    failed=1
    finish
  fi

  # -- (c) the model ------------------------------------------------------------------
  [[ -n $model_pid ]] || start_model || true
  local model_ok=0
  if [[ -n $model_pid ]] && wait "$model_pid"; then
    model_ok=1
  fi
  model_pid=""
  if ((model_ok)) && [[ -f $model ]]; then
    timeout 60 "$caflm" inspect "$model" --json >"$work/inspect.json" 2>"$work/inspect.log" || true
    local vocab
    vocab="$(inspect_sizes "$work/inspect.json" | cut -d ' ' -f 2)"
    add_row "1.1B BF16 model" "$(($(stat -c %s "$model") / 1000000)) MB, ${vocab:-?}-token vocab" \
      "written" PASS
  else
    tail -n 20 "$work/model.log" 2>/dev/null || true
    add_row "1.1B BF16 model" "make-test-model failed or timed out" "written" FAIL
    failed=1
    finish
  fi

  # -- (d) the bench ------------------------------------------------------------------
  t=$(step_timeout 240 0)
  local concurrency
  concurrency="$(
    IFS=,
    echo "${CONCURRENCY[*]}"
  )"
  log "bench --device cuda, B=$concurrency, $PROMPT_TOKENS+$GEN_TOKENS tokens (timeout ${t}s)"
  status=0
  if ((t == 0)); then
    echo "no time left for the bench" >"$work/bench.err"
    status=124
  else
    timeout "$t" "$caflm" bench --device cuda --model "$model" --prompt-tokens "$PROMPT_TOKENS" \
      --gen-tokens "$GEN_TOKENS" --concurrency "$concurrency" --json \
      >"$work/bench.out" 2>"$work/bench.err" || status=$?
  fi
  if ((status != 0)); then
    tail -n 20 "$work/bench.err"
    add_row "bench" "exit $status$( ((status == 124)) && echo ' (timed out)')" "exit 0" FAIL
    failed=1
  else
    grep '^{' "$work/bench.out" | tail -n 1
  fi
  touch "$work/bench.out"

  # What the launch options pay: B=1 and B=32 again with decode graphs off
  # (CAFLM_CUDA_GRAPHS=0) and with programmatic launches on (CAFLM_CUDA_PDL=1),
  # a row each against the default run (informational).
  local variant setting label with other b
  for variant in graphs pdl; do
    t=$(step_timeout 90 0)
    ((status == 0 && t > 0)) || continue
    if [[ $variant == graphs ]]; then
      setting=CAFLM_CUDA_GRAPHS=0 label="graphs on / off"
    else
      setting=CAFLM_CUDA_PDL=1 label="programmatic launches off / on"
    fi
    log "bench with $setting, B=1,32 (timeout ${t}s)"
    if env "$setting" timeout "$t" "$caflm" bench --device cuda --model "$model" \
      --prompt-tokens "$PROMPT_TOKENS" --gen-tokens "$GEN_TOKENS" --concurrency 1,32 --json \
      >"$work/bench_$variant.out" 2>"$work/bench_$variant.err"; then
      for b in 1 32; do
        with=$(bench_rows "$work/bench.out" | awk -v b="$b" '$1 == b { print $3 }')
        other=$(bench_rows "$work/bench_$variant.out" | awk -v b="$b" '$1 == b { print $3 }')
        add_row "decode B=$b $label" "${with:-none} / ${other:-none} tok/s" "informational" INFO
      done
    else
      add_row "bench with $setting" "failed or timed out" "informational" INFO
    fi
  done

  # The linear layers of one decode step alone, serial and programmatic
  # (bench_cuda_linear; informational).
  t=$(step_timeout 60 0)
  if ((t > 0)) && [[ -x $linear_bench ]]; then
    log "bench_cuda_linear, B=1,32 (timeout ${t}s)"
    if timeout "$t" "$linear_bench" --rows 1,32 >"$work/linear.out" 2>&1; then
      cat "$work/linear.out"
      awk '$1 ~ /^[0-9]+$/ {
          printf "linear layers B=%s serial / programmatic\t%s / %s ms (%s / %s TB/s)\tinformational\tINFO\n",
            $1, $2, $4, $3, $5 }' "$work/linear.out" >>"$summary_file"
    else
      tail -n 5 "$work/linear.out"
      add_row "bench_cuda_linear" "failed or timed out" "informational" INFO
    fi
  fi

  # -- (e), (f) ---------------------------------------------------------------------------
  judge_bench "$work/bench.out" "$work/inspect.json" "$bandwidth"
  grep -q $'\tFAIL$' "$summary_file" && failed=1
  finish
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
