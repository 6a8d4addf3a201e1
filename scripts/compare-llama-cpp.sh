#!/usr/bin/env bash
# caflm against llama.cpp on this machine, in one run: for each weight type,
# the same random model (by default a 134M Llama: dim 768, 12 layers, vocab
# 32000; --shape picks another) through
# `caflm bench` and through llama.cpp's batched bench (tools/llama_cpp,
# node-llama-cpp's prebuilt CPU llama.cpp), in interleaved rounds; then the
# caflm/llama.cpp ratios (median over rounds) of decode at B=1 and B=32 and
# of prefill at B=1, and a plot of decode tok/s against concurrency
# (scripts/llama-cpp-results.py).
#
# Usage: scripts/compare-llama-cpp.sh [--caflm BIN] [--out DIR] [--rounds N]
#          [--types "f32 f16 q8_0 q4_k_m"] [--threads T] [--concurrency 1,2,4,...]
#          [--kv-cache-type auto|f32|f16]   (caflm's, default auto; llama.cpp keeps its default, f16)
#          [--shape llama134m|smollm135m|qwen05b|tinyllama]
# The shapes other than the default copy a public model's (with this
# vocabulary of 32000): SmolLM-135M (576 wide, 30 layers, 9/3 heads, FFN
# 1536), Qwen2.5-0.5B (896, 24, 14/2, 4864, qkv biases, tied embeddings) and
# TinyLlama-1.1B (2048, 22, 32/4, 5632). Widths that are not a multiple of
# 256 make Q4_K_M fall back to Q5_0 and Q8_0 as llama-quantize does.
# Needs: tools/llama_cpp installed (npm install there), python3-matplotlib
# for the plot. Timings on a shared machine vary: only ratios in one run
# mean anything.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
caflm="$root/build/apps/caflm"
out="$root/build/compare-llama-cpp"
rounds=3
types="f32 f16 q8_0 q4_k_m"
threads=2
concurrency="1,2,4,8,16,32,64"
kv_cache_type=auto
shape=llama134m
vocab="$root/../shared/testdata/vocab/ggml-vocab-llama-spm.gguf"
while (($#)); do
  case $1 in
  --caflm) caflm=$2; shift 2 ;;
  --out) out=$2; shift 2 ;;
  --rounds) rounds=$2; shift 2 ;;
  --types) types=$2; shift 2 ;;
  --threads) threads=$2; shift 2 ;;
  --concurrency) concurrency=$2; shift 2 ;;
  --vocab) vocab=$2; shift 2 ;;
  --kv-cache-type) kv_cache_type=$2; shift 2 ;;
  --shape) shape=$2; shift 2 ;;
  *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -x $caflm ]] || { echo "no caflm binary at $caflm (--caflm BIN)" >&2; exit 1; }
[[ -d $root/tools/llama_cpp/node_modules ]] ||
  { echo "install tools/llama_cpp first: (cd tools/llama_cpp && npm install)" >&2; exit 1; }
case $shape in
llama134m) shape_args=(--arch llama --dim 768 --layers 12 --heads 12 --kv-heads 12 --ffn 2048) ;;
smollm135m) shape_args=(--arch llama --dim 576 --layers 30 --heads 9 --kv-heads 3 --ffn 1536) ;;
qwen05b) shape_args=(--arch qwen2 --dim 896 --layers 24 --heads 14 --kv-heads 2 --ffn 4864 --tied) ;;
tinyllama) shape_args=(--arch llama --dim 2048 --layers 22 --heads 32 --kv-heads 4 --ffn 5632) ;;
*) echo "unknown shape $shape (llama134m, smollm135m, qwen05b or tinyllama)" >&2; exit 2 ;;
esac
mkdir -p "$out"

for type in $types; do
  model="$out/$shape-$type.gguf"
  if [[ ! -f $model ]]; then
    if [[ $type == q4_k_m ]]; then type_args=(--mix q4_k_m); else type_args=(--type "$type"); fi
    "$caflm" make-test-model "${shape_args[@]}" --vocab "$vocab" --context 2048 --seed 1 \
      "${type_args[@]}" --out "$model" >/dev/null 2>&1
  fi
  for round in $(seq "$rounds"); do
    echo "# $type, round $round" >&2
    # Decode at every concurrency for the plot; prefill at B=1 and decode at
    # 1 and 32 for the table come out of the same runs.
    OMP_NUM_THREADS=$threads "$caflm" bench --model "$model" --device cpu --prompt-tokens 128 \
      --gen-tokens 64 --concurrency "$concurrency" --kv-cache-type "$kv_cache_type" --no-kv-waste --json \
      >"$out/caflm-$type-$round.json"
    node "$root/tools/llama_cpp/batched-bench.mjs" --model "$model" --npp 128 --ntg 64 \
      --npl "$concurrency" --threads "$threads" --repeat 1 >"$out/llama-$type-$round.jsonl" 2>/dev/null
  done
done

# Debian's python3 has python3-matplotlib; a python3 earlier on PATH may not.
results_python=python3
[[ -x /usr/bin/python3 ]] && results_python=/usr/bin/python3
rm -f "$out/decode-vs-concurrency.png"
"$results_python" "$root/scripts/llama-cpp-results.py" --dir "$out" --types "$types" \
  --rounds "$rounds" --plot "$out/decode-vs-concurrency.png"
if [[ -f $out/decode-vs-concurrency.png ]]; then
  echo "plot: $out/decode-vs-concurrency.png" >&2
fi
