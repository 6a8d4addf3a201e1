#!/usr/bin/env bash
# caflm against llama.cpp on this machine, in one run: for each weight type,
# the same random 134M Llama (dim 768, 12 layers, vocab 32000) through
# `caflm bench` and through llama.cpp's batched bench (tools/llama_cpp,
# node-llama-cpp's prebuilt CPU llama.cpp), in interleaved rounds; then the
# caflm/llama.cpp ratios (median over rounds) of decode at B=1 and B=32 and
# of prefill at B=1, and a plot of decode tok/s against concurrency.
#
# Usage: scripts/compare-llama-cpp.sh [--caflm BIN] [--out DIR] [--rounds N]
#          [--types "f32 f16 q8_0 q4_k_m"] [--threads T] [--concurrency 1,2,4,...]
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
  *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -x $caflm ]] || { echo "no caflm binary at $caflm (--caflm BIN)" >&2; exit 1; }
[[ -d $root/tools/llama_cpp/node_modules ]] ||
  { echo "install tools/llama_cpp first: (cd tools/llama_cpp && npm install)" >&2; exit 1; }
mkdir -p "$out"

for type in $types; do
  model="$out/llama134m-$type.gguf"
  if [[ ! -f $model ]]; then
    if [[ $type == q4_k_m ]]; then type_args=(--mix q4_k_m); else type_args=(--type "$type"); fi
    "$caflm" make-test-model --arch llama --dim 768 --layers 12 --heads 12 --kv-heads 12 \
      --ffn 2048 --vocab "$vocab" --context 2048 --seed 1 "${type_args[@]}" --out "$model" >/dev/null 2>&1
  fi
  for round in $(seq "$rounds"); do
    echo "# $type, round $round" >&2
    # Decode at every concurrency for the plot; prefill at B=1 and decode at
    # 1 and 32 for the table come out of the same runs.
    OMP_NUM_THREADS=$threads "$caflm" bench --model "$model" --device cpu --prompt-tokens 128 \
      --gen-tokens 64 --concurrency "$concurrency" --no-kv-waste --json \
      >"$out/caflm-$type-$round.json"
    node "$root/tools/llama_cpp/batched-bench.mjs" --model "$model" --npp 128 --ntg 64 \
      --npl "$concurrency" --threads "$threads" --repeat 1 >"$out/llama-$type-$round.jsonl" 2>/dev/null
  done
done

python3 - "$out" "$rounds" "$types" <<'EOF'
import json, statistics, sys
out, rounds, types = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
def caflm(t, r):
    rows = json.load(open(f"{out}/caflm-{t}-{r}.json"))["results"]
    return {row["concurrency"]: row for row in rows}
def llama(t, r):
    rows = [json.loads(l) for l in open(f"{out}/llama-{t}-{r}.jsonl") if l.startswith("{")]
    return {row["b"]: row for row in rows}
print("| figure | " + " | ".join(types) + " |")
print("| --- |" + " --- |" * len(types))
for name, b, key_c, key_l in [("decode, 1 sequence", 1, "decode_tok_s", "decode_tok_s"),
                               ("decode, 32 sequences", 32, "decode_tok_s", "decode_tok_s"),
                               ("prefill, one 128-token sequence", 1, "prefill_tok_s", "prefill_tok_s")]:
    cells = []
    for t in types:
        ratios, c_abs, l_abs = [], [], []
        for r in range(1, rounds + 1):
            c, l = caflm(t, r), llama(t, r)
            if b in c and b in l:
                ratios.append(c[b][key_c] / l[b][key_l])
                c_abs.append(c[b][key_c]); l_abs.append(l[b][key_l])
        cells.append(f"x{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}] "
                     f"({statistics.median(c_abs):.0f} vs {statistics.median(l_abs):.0f})"
                     if ratios else "n/a")
    print(f"| {name} | " + " | ".join(cells) + " |")
fractions = []
for t in types:
    c = caflm(t, 1)
    if 1 in c and c[1].get("decode_bandwidth_fraction") is not None:
        fractions.append(f"{t} {100 * c[1]['decode_bandwidth_fraction']:.0f}%")
print("\nB=1 decode, fraction of the measured read bandwidth (round 1): " + ", ".join(fractions))
EOF

# Debian's python3 has python3-matplotlib; a python3 earlier on PATH may not.
plot_python=python3
[[ -x /usr/bin/python3 ]] && plot_python=/usr/bin/python3
"$plot_python" "$root/scripts/plot-decode.py" --out "$out/decode-vs-concurrency.png" --dir "$out" \
  --types "$types" --rounds "$rounds" || echo "no plot (python3-matplotlib missing?)" >&2
echo "plot: $out/decode-vs-concurrency.png" >&2
