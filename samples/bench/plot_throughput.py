#!/usr/bin/env python3
"""Plots pulseinfer-throughput records: output tokens/s against concurrent requests, one panel a
(KV cap, context) cell, one line a (mode, picks, fixed micro-batches, host codec) tuple; dense,
which picks nothing, is in every panel of its cell. A point measured more than once is its last record; each line names the
commits its points ran at. Records that did not fit are left out.

    python3 samples/bench/plot_throughput.py RECORDS.jsonl OUT.png [--commit SHA]... [--source NAME]...

RECORDS may be the results history (samples/bench/results/history.jsonl): --source keeps the
records committed in those files, --commit those of those commits. Needs matplotlib."""
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
    parser.add_argument("--commit", action="append", help="only the records of this commit")
    parser.add_argument("--source", action="append", help="only the records of this source file")
    args = parser.parse_args()
    # cell -> (mode, picks, fixed micro-batches or 0, codec) -> concurrency -> record
    panels = collections.defaultdict(lambda: collections.defaultdict(dict))
    with open(args.records) as lines:
        for line in lines:
            record = json.loads(line)
            if record.get("bench") != "throughput" or not record.get("fits"):
                continue
            if args.commit and record.get("commit") not in args.commit:
                continue
            if args.source and record.get("source") not in args.source:
                continue
            # Records from before host codecs kept the device's bf16 blocks.
            line_key = (record["mode"], record["picks"], record.get("micro_batch_setting") or 0,
                        record.get("codec", "bf16"))
            panels[(record["kv_mib"], record["context"])][line_key][record["concurrency"]] = record
    if not panels:
        raise SystemExit(f"no throughput records that fit in {args.records}")
    cells = sorted(panels)
    figure, axes = plt.subplots(1, len(cells), figsize=(6 * len(cells), 4.5), squeeze=False)
    for axis, cell in zip(axes[0], cells):
        kv_mib, context = cell
        axis.set_prop_cycle(color=plt.get_cmap("tab20").colors)
        for (mode, picks, micro_batches, codec), points in sorted(panels[cell].items()):
            counts = sorted(points)
            commits = sorted({points[n].get("commit", "?") for n in counts})
            label = mode if mode == "dense" else f"{mode}, picks {picks}"
            if micro_batches:
                label += f", {micro_batches} micro-batches"
            if codec == "fp8":
                label += ", fp8 host tier"
            axis.plot(counts, [points[n]["tokens_per_s"] for n in counts], marker="o",
                      label=f"{label} ({', '.join(commits)})")
        axis.set_title(f"KV memory {kv_mib / 1024:g} GiB, {context}-token contexts")
        axis.set_xlabel("concurrent requests")
        axis.set_ylabel("output tokens/s")
        axis.set_xscale("log", base=2)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize="x-small")
    figure.tight_layout()
    figure.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
