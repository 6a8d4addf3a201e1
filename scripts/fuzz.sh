#!/usr/bin/env bash
# Builds caflm's libFuzzer targets (fuzz/) with clang, seeds their corpora and
# runs each for M minutes, P runs at a time, each on one core. Prints, per
# run, the inputs executed, the corpus size and the findings (crash, leak,
# timeout and out-of-memory inputs); exits 1 if there is a finding.
#
#   scripts/fuzz.sh [--minutes M] [--parallel P] [--build-dir DIR] [--only NAME]...
#                   [-- LIBFUZZER_FLAGS...]
#
# M defaults to 10 (fractions such as 0.5 work), P to 1. DIR defaults to build-fuzz.
# NAME is a run's name (gguf, tokenizer-spm, tokenizer-gpt2,
# tokenizer-gpt2-llama3, tokenizer-byte-level, vocabulary, messages, request-file,
# openai-protocol); --only may repeat. Flags after -- go to every run
# (e.g. -jobs=1 -workers=1). Corpora stay in DIR/fuzz-corpus/NAME and grow
# from run to run; findings land in DIR/fuzz-findings/NAME/, logs in
# DIR/fuzz-logs/NAME.log. Test data comes from ../shared/testdata (or
# $CAFLM_TESTDATA_DIR).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
minutes=10
parallel=1
build_dir="$root/build-fuzz"
only=()
extra_flags=()
while [[ $# -gt 0 ]]; do
  case "$1" in
  --minutes)
    minutes="$2"
    shift 2
    ;;
  --parallel)
    parallel="$2"
    shift 2
    ;;
  --build-dir)
    build_dir="$(realpath -m "$2")"
    shift 2
    ;;
  --only)
    only+=("$2")
    shift 2
    ;;
  --)
    shift
    extra_flags=("$@")
    break
    ;;
  -h | --help)
    sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "fuzz.sh: unknown argument '$1' (see --help)" >&2
    exit 2
    ;;
  esac
done
if ! seconds=$(python3 -c "import sys; s = round(float(sys.argv[1]) * 60); assert s > 0; print(s)" \
  "$minutes" 2>/dev/null); then
  echo "fuzz.sh: --minutes needs a positive number, not '$minutes'" >&2
  exit 2
fi
if [[ ! "$parallel" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz.sh: --parallel needs a positive whole number, not '$parallel'" >&2
  exit 2
fi
testdata="${CAFLM_TESTDATA_DIR:-$root/../shared/testdata}"
if [[ ! -d "$testdata/vocab" ]]; then
  echo "fuzz.sh: no test data at $testdata (set CAFLM_TESTDATA_DIR)" >&2
  exit 2
fi
testdata="$(realpath "$testdata")"

# -- build ----------------------------------------------------------------------
# Only the fuzz targets are built; CUDA, tests, benchmarks and examples stay off.
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCAFLM_BUILD_FUZZERS=ON -DCAFLM_BUILD_TESTS=OFF -DCAFLM_BUILD_BENCHMARKS=OFF \
  -DCAFLM_BUILD_EXAMPLES=OFF -DCAFLM_ENABLE_CUDA=OFF >/dev/null
ninja -C "$build_dir" gguf_fuzz gguf_fuzz_seeds tokenizer_fuzz vocabulary_fuzz messages_fuzz \
  request_file_fuzz openai_protocol_fuzz
bin="$build_dir/fuzz"

# -- seeds ----------------------------------------------------------------------
seeds="$build_dir/fuzz-seeds"
rm -rf "$seeds"
mkdir -p "$seeds"/{gguf,tokenizer-spm,tokenizer-gpt2,vocabulary,messages,request-file,openai-protocol}

"$bin/gguf_fuzz_seeds" "$seeds/gguf" "$testdata/models/tiny-llama-f32.gguf" >/dev/null

# Tokenizer inputs start with a flag byte (see fuzz/tokenizer_fuzz.cpp): each
# test text as plain text (0x00) and with BOS and special tokens (0x06), and
# each expected id list as ids (0x01, 3 bytes little-endian per id).
python3 - "$testdata/vocab" "$seeds" <<'EOF'
import os, sys
vocab_dir, seeds = sys.argv[1], sys.argv[2]
for name, run in (("ggml-vocab-llama-spm.gguf", "tokenizer-spm"),
                  ("ggml-vocab-gpt-2.gguf", "tokenizer-gpt2")):
    base = os.path.join(vocab_dir, name)
    with open(base + ".inp", "rb") as f:
        texts = f.read().split(b"\n__ggml_vocab_test__\n")
    with open(base + ".out", "rb") as f:
        id_lines = f.read().split(b"\n")
    for i, text in enumerate(texts):
        for flags in (0x00, 0x06):
            with open(os.path.join(seeds, run, f"text-{i}-{flags}"), "wb") as out:
                out.write(bytes([flags]) + text)
    for i, line in enumerate(id_lines):
        ids = [int(x) for x in line.split()]
        if ids:
            with open(os.path.join(seeds, run, f"ids-{i}"), "wb") as out:
                out.write(bytes([0x01]) + b"".join(x.to_bytes(3, "little") for x in ids))
EOF

CAFLM_FUZZ_SEEDS_OUT="$seeds/vocabulary" "$bin/vocabulary_fuzz" >/dev/null
CAFLM_FUZZ_SEEDS_OUT="$seeds/messages" "$bin/messages_fuzz" >/dev/null

# One seed file per line below.
write_lines() {
  local dir="$1" i=0 line
  while IFS= read -r line; do
    printf '%s' "$line" >"$dir/seed-$i"
    i=$((i + 1))
  done
}

write_lines "$seeds/request-file" <<'EOF'
{"prompt": "Hello", "max_tokens": 8}
{"id": "a", "prompt_tokens": [1, 15043, 3186], "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 42, "stop": ["\n", "END"], "ignore_eos": true, "top_logprobs": 2, "priority": 3}
{"id": 12, "prompt": "Once upon a time", "repetition_penalty": 1.1, "presence_penalty": 0.5, "frequency_penalty": -0.5, "stop": "END", "top_k": -1}
{"id": null, "prompt": "x", "temperature": 0}
{"prompt": "caf\u00e9 \ud83d\ude80", "max_tokens": 4294967295, "seed": 18446744073709551615}
{"promt": "misspelt"}
{"prompt": "a", "prompt_tokens": [1]}
{"prompt_tokens": [4294967296]}
[1, 2, 3]
{"prompt": "a", "temperature": 1e999}
EOF

write_lines "$seeds/openai-protocol" <<'EOF'
{"model": "tiny", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "max_tokens": 16, "temperature": 0.7, "top_p": 0.9, "n": 2, "stream": true, "stream_options": {"include_usage": true}, "stop": ["\n"], "seed": 1, "logprobs": true, "top_logprobs": 2, "user": "u", "priority": 1, "presence_penalty": 0.1, "frequency_penalty": 0.2}
{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, {"role": "assistant", "content": null, "tool_calls": []}, {"role": "developer", "content": "x"}], "max_completion_tokens": 5}
{"messages": [{"role": "user", "content": "caf\u00e9"}], "stop": "END", "min_p": 0.1, "top_k": 20, "repetition_penalty": 1.2}
{"model": "tiny", "prompt": "Once", "max_tokens": 4, "logprobs": 2, "echo": true, "best_of": 1, "n": 1}
{"prompt": ["a", "b"], "stop": "x", "stream": false}
{"prompt": [1, 2, 3]}
{"prompt": [[1, 2], [3]], "temperature": 0}
{"prompt": "a", "max_tokens": null, "n": 200}
{"messages": []}
[]
EOF

# -- runs -----------------------------------------------------------------------
# name|binary|seed directory|environment (space-separated NAME=VALUE)
runs=(
  "gguf|gguf_fuzz|gguf|"
  "tokenizer-spm|tokenizer_fuzz|tokenizer-spm|CAFLM_FUZZ_VOCAB=$testdata/vocab/ggml-vocab-llama-spm.gguf"
  "tokenizer-gpt2|tokenizer_fuzz|tokenizer-gpt2|CAFLM_FUZZ_VOCAB=$testdata/vocab/ggml-vocab-gpt-2.gguf"
  "tokenizer-gpt2-llama3|tokenizer_fuzz|tokenizer-gpt2|CAFLM_FUZZ_VOCAB=$testdata/vocab/ggml-vocab-gpt-2.gguf CAFLM_FUZZ_PRE=llama-bpe"
  "tokenizer-byte-level|tokenizer_fuzz|tokenizer-gpt2|"
  "vocabulary|vocabulary_fuzz|vocabulary|"
  "messages|messages_fuzz|messages|"
  "request-file|request_file_fuzz|request-file|"
  "openai-protocol|openai_protocol_fuzz|openai-protocol|"
)

selected() {
  [[ ${#only[@]} -eq 0 ]] && return 0
  local name
  for name in "${only[@]}"; do
    [[ "$name" == "$1" ]] && return 0
  done
  return 1
}

mkdir -p "$build_dir"/{fuzz-corpus,fuzz-findings,fuzz-logs}

# Runs one fuzz target and writes its summary (first line: the number of
# findings) to DIR/fuzz-logs/NAME.summary.
fuzz_one() {
  local name="$1" binary="$2" seed_dir="$3" environment="$4"
  local corpus="$build_dir/fuzz-corpus/$name"
  local findings="$build_dir/fuzz-findings/$name"
  local log="$build_dir/fuzz-logs/$name.log"
  local work="$build_dir/fuzz-work/$name" # libFuzzer's -jobs logs land in the working directory
  rm -rf "$work"
  mkdir -p "$corpus" "$findings" "$work"
  local status=0
  (
    cd "$work"
    # shellcheck disable=SC2086 # environment is a list of NAME=VALUE words
    env $environment "$bin/$binary" "$corpus" "$seeds/$seed_dir" -max_total_time="$seconds" \
      -timeout=30 -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 \
      -artifact_prefix="$findings/" "${extra_flags[@]}"
  ) >"$log" 2>&1 || status=$?
  # With -jobs, libFuzzer prints each job's log (fuzz-N.log) into its own
  # output when the job ends, so $log holds everything either way.
  local execs corpus_files corpus_bytes found n_found=0 line file
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{s += $2} END {print s + 0}')
  corpus_files=$(find "$corpus" -type f | wc -l)
  corpus_bytes=$(du -sb "$corpus" | cut -f1)
  found=$(find "$findings" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
    -o -name 'oom-*' \) | sort)
  [[ -n "$found" ]] && n_found=$(wc -l <<<"$found")
  line="$name: $execs executions, corpus $corpus_files inputs ($corpus_bytes bytes), $n_found findings (exit $status)"
  if [[ -n "$found" ]]; then
    while IFS= read -r file; do
      line+=$'\n'"  $file"
    done <<<"$found"
  fi
  printf '%s\n%s\n' "$n_found" "$line" >"$build_dir/fuzz-logs/$name.summary"
  echo "$line"
}

names=()
running=0
for run in "${runs[@]}"; do
  IFS='|' read -r name binary seed_dir environment <<<"$run"
  selected "$name" || continue
  names+=("$name")
  rm -f "$build_dir/fuzz-logs/$name.summary"
  if ((running == parallel)); then
    wait -n || true
    running=$((running - 1))
  fi
  echo "== $name: $binary for $seconds s"
  fuzz_one "$name" "$binary" "$seed_dir" "$environment" &
  running=$((running + 1))
done
wait

echo
echo "== summary (logs in $build_dir/fuzz-logs)"
findings_total=0
for name in "${names[@]}"; do
  summary="$build_dir/fuzz-logs/$name.summary"
  if [[ ! -f "$summary" ]]; then
    echo "$name: no summary (the run itself failed; see its log)"
    findings_total=$((findings_total + 1))
    continue
  fi
  findings_total=$((findings_total + $(head -n 1 "$summary")))
  tail -n +2 "$summary"
done
[[ $findings_total -eq 0 ]]
