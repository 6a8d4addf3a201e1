#!/usr/bin/env python3
"""Decode tokens/s against concurrency, caflm and llama.cpp, one colour per
weight type: the picture of scripts/compare-llama-cpp.sh's results (the
median over its rounds at each concurrency)."""
import argparse
import json
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402


def medians(rows_per_round, key):
    by_b = {}
    for rows in rows_per_round:
        for b, row in rows.items():
            if row.get(key) is not None:
                by_b.setdefault(b, []).append(row[key])
    return sorted((b, statistics.median(v)) for b, v in by_b.items())


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="PNG file to write")
    parser.add_argument("--dir", required=True, help="compare-llama-cpp.sh's output folder")
    parser.add_argument("--types", required=True, help="weight types, space-separated")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--title", default="Decode throughput, 134M Llama, 2-core CPU")
    args = parser.parse_args()

    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, t in enumerate(args.types.split()):
        caflm, llama = [], []
        for r in range(1, args.rounds + 1):
            try:
                rows = json.load(open(f"{args.dir}/caflm-{t}-{r}.json"))["results"]
                caflm.append({row["concurrency"]: row for row in rows})
            except FileNotFoundError:
                pass
            try:
                lines = open(f"{args.dir}/llama-{t}-{r}.jsonl")
                llama.append({row["b"]: row for row in map(json.loads, lines)})
            except FileNotFoundError:
                pass
        colour = colours[i % len(colours)]
        for rows, style, engine in [(caflm, "-o", "caflm"), (llama, "--s", "llama.cpp")]:
            points = medians(rows, "decode_tok_s")
            if points:
                ax.plot([b for b, _ in points], [v for _, v in points], style, color=colour,
                        label=f"{engine} {t.upper()}")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%d"))
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("concurrent sequences (B)")
    ax.set_ylabel("decode tokens/s")
    ax.set_title(args.title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(ncol=2, fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out)


if __name__ == "__main__":
    main()
