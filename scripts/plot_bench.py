#!/usr/bin/env python3
"""Plot sgemm-bench CSV output: TFLOP/s per shape (ordered by FLOPs), one line per kernel.

usage: plot_bench.py BENCH.csv OUT.png [--variants]
Needs matplotlib (present on the GPU machine's python3).
"""
import csv
import sys


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    src, dst = sys.argv[1], sys.argv[2]
    with_variants = "--variants" in sys.argv
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(csv.DictReader(open(src)))
    shapes = []
    for r in rows:
        key = (2.0 * int(r["m"]) * int(r["n"]) * int(r["k"]), r["shape"])
        if key not in shapes:
            shapes.append(key)
    shapes.sort()
    names = [s for _, s in shapes]
    series = {}
    for r in rows:
        label = r["kernel"]
        if r["kernel"] != "cublas" and not r["variant"].startswith("auto:"):
            if not with_variants:
                continue
            label = "pingpong " + r["variant"]
        series.setdefault(label, {})[r["shape"]] = float(r["tflops"])
    fig, ax = plt.subplots(figsize=(10, 5))
    for label, pts in sorted(series.items()):
        xs = [i for i, s in enumerate(names) if s in pts]
        ax.plot(xs, [pts[names[i]] for i in xs], marker="o", label=label)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right")
    ax.set_xlabel("shape (M=N=K, or MxNxK), ordered by FLOPs")
    ax.set_ylabel("TFLOP/s (fp32, median)")
    device = rows[0]["device"] if rows else ""
    ax.set_title(f"sgemm-bench on {device}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(dst, dpi=120)
    print(f"wrote {dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
