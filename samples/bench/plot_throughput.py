#!/usr/bin/env python3
"""Plots pulseinfer-throughput records: output tokens/s against concurrent requests, one line a
mode, one panel a (KV cap, context, picks) cell. Records that did not fit are left out.

    python3 samples/bench/plot_throughput.py RECORDS.jsonl OUT.png [--commit SHA]

Needs matplotlib (pip install matplotlib)."""
import argparse
import collections
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records")
    parser.add_argument("out")
    parser.add_argument("--commit", help="only the records of this commit")
    args = parser.parse_args()
    panels = collections.defaultdict(lambda: collections.defaultdict(list))
    with open(args.records) as lines:
        for line in lines:
            record = json.loads(line)
            if record.get("bench") != "throughput" or not record.get("fits"):
                continue
            if args.commit and record.get("commit") != args.commit:
                continue
            cell = (record["kv_mib"], record["context"], record["picks"])
            panels[cell][record["mode"]].append((record["concurrency"], record["tokens_per_s"]))
    if not panels:
        raise SystemExit(f"no throughput records that fit in {args.records}")
    cells = sorted(panels)
    figure, axes = plt.subplots(1, len(cells), figsize=(5 * len(cells), 4), squeeze=False)
    for axis, cell in zip(axes[0], cells):
        kv_mib, context, picks = cell
        for mode, points in sorted(panels[cell].items()):
            points.sort()
            axis.plot([n for n, _ in points], [t for _, t in points], marker="o", label=mode)
        axis.set_title(f"KV {kv_mib:g} MiB, context {context}, picks {picks}")
        axis.set_xlabel("concurrent requests")
        axis.set_ylabel("output tokens/s")
        axis.set_xscale("log", base=2)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(args.out, dpi=120)


if __name__ == "__main__":
    main()
