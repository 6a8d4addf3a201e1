#!/usr/bin/env python3
"""scripts/compare-llama-cpp.sh's results: the caflm/llama.cpp ratio table
(median over the rounds, with their range and both engines' tok/s) and, with
--plot, a picture of decode tokens/s against concurrency, one colour per
weight type (python3-matplotlib)."""
import argparse
import json
import statistics
import sys


def caflm_rows(folder, weight_type, round_):
    """caflm bench --json results of one round, by concurrency."""
    try:
        rows = json.load(open(f"{folder}/caflm-{weight_type}-{round_}.json"))["results"]
    except FileNotFoundError:
        return {}
    return {row["concurrency"]: row for row in rows}


def llama_rows(folder, weight_type, round_):
    """batched-bench.mjs results of one round, by concurrency."""
    try:
        lines = open(f"{folder}/llama-{weight_type}-{round_}.jsonl")
    except FileNotFoundError:
        return {}
    rows = [json.loads(line) for line in lines if line.startswith("{")]
    return {row["b"]: row for row in rows}


def print_table(folder, types, rounds):
    print("| figure | " + " | ".join(types) + " |")
    print("| --- |" + " --- |" * len(types))
    for name, b, key in [("decode, 1 sequence", 1, "decode_tok_s"),
                         ("decode, 32 sequences", 32, "decode_tok_s"),
                         ("prefill, one 128-token sequence", 1, "prefill_tok_s")]:
        cells = []
        for t in types:
            ratios, c_abs, l_abs = [], [], []
            for r in range(1, rounds + 1):
                c, l = caflm_rows(folder, t, r), llama_rows(folder, t, r)
                if b in c and b in l:
                    ratios.append(c[b][key] / l[b][key])
                    c_abs.append(c[b][key])
                    l_abs.append(l[b][key])
            cells.append(f"x{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}] "
                         f"({statistics.median(c_abs):.0f} vs {statistics.median(l_abs):.0f})"
                         if ratios else "n/a")
        print(f"| {name} | " + " | ".join(cells) + " |")
    fractions = []
    for t in types:
        c = caflm_rows(folder, t, 1)
        if 1 in c and c[1].get("decode_bandwidth_fraction") is not None:
            fractions.append(f"{t} {100 * c[1]['decode_bandwidth_fraction']:.0f}%")
    print("\nB=1 decode, fraction of the measured read bandwidth (round 1): " + ", ".join(fractions))


def medians(rows_per_round, key):
    by_b = {}
    for rows in rows_per_round:
        for b, row in rows.items():
            if row.get(key) is not None:
                by_b.setdefault(b, []).append(row[key])
    return sorted((b, statistics.median(v)) for b, v in by_b.items())


def plot(folder, types, rounds, out, title):
    try:
        import matplotlib
    except ImportError:
        print(f"no plot: {sys.executable} has no matplotlib (apt-get install python3-matplotlib)",
              file=sys.stderr)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, t in enumerate(types):
        colour = colours[i % len(colours)]
        for load, style, engine in [(caflm_rows, "-o", "caflm"), (llama_rows, "--s", "llama.cpp")]:
            points = medians([load(folder, t, r) for r in range(1, rounds + 1)], "decode_tok_s")
            if points:
                ax.plot([b for b, _ in points], [v for _, v in points], style, color=colour,
                        label=f"{engine} {t.upper()}")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%d"))
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("concurrent sequences (B)")
    ax.set_ylabel("decode tokens/s")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(ncol=2, fontsize=8)
    fig.tight_layout()
    fig.savefig(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", required=True, help="compare-llama-cpp.sh's output folder")
    parser.add_argument("--types", required=True, help="weight types, space-separated")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--plot", help="PNG file to write")
    parser.add_argument("--title", default="Decode throughput, 134M Llama, 2-core CPU")
    args = parser.parse_args()
    types = args.types.split()
    print_table(args.dir, types, args.rounds)
    if args.plot:
        plot(args.dir, types, args.rounds, args.plot, args.title)


if __name__ == "__main__":
    main()
