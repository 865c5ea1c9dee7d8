"""Prints the records of pulseinfer-bench and hf_decode.py JSON Lines files as tables."""
import json
import sys


def main() -> None:
    records = [json.loads(line) for path in sys.argv[1:] for line in open(path) if line.strip()]
    decode = [r for r in records if r["bench"] in ("decode", "peer")]
    for r in decode:  # op by op (no graphs) is said in the mode column
        if r.get("graphs") is False:
            r["mode"] += " (no graphs)"
    if decode:
        print(f"{'mode':<22} {'batch x context':>16} {'TPOT p50 ms':>12} {'p99 ms':>8} "
              f"{'tok/s':>9} {'floor ms':>9} {'of floor':>9}")
        for r in decode:
            shape = f"{r['batch']} x {r['context']}"
            if "error" in r:
                print(f"{r['mode']:<22} {shape:>16} {r['error'][:40]}")
                continue
            floor = r.get("hbm_floor_ms")
            floor_text = "" if floor is None else f"{floor:.2f}"
            fraction = "" if floor is None else f"{r['roofline_fraction']:.0%}"
            print(f"{r['mode']:<22} {shape:>16} {r['tpot_ms_p50']:>12.2f} {r['tpot_ms_p99']:>8.2f} "
                  f"{r['decode_tok_s']:>9.1f} {floor_text:>9} {fraction:>9}")
    offloaded = [r for r in decode if r.get("budget") is not None and "error" not in r]
    if offloaded:
        print(f"{'mode':<22} {'batch x context':>16} {'budget':>7} {'slots':>7} {'KV GiB':>7} "
              f"{'recall MB/step':>15} {'recall GB/s':>12} {'link GB/s':>10} {'slot hits':>10} "
              f"{'plan ms':>8} {'syncs':>6} {'serial bound':>13}")
        for r in offloaded:
            rate = "" if r["pcie_gb_s"] is None else f"{r['pcie_gb_s']:.1f}"
            hits = "" if r["cache_hit_rate"] is None else f"{r['cache_hit_rate']:.1%}"
            slots = r.get("slot_tokens")
            slots_text = "" if slots is None else str(slots)
            # The host's time selecting (records from b143954 on), then planning a step.
            selection = r.get("selection_ms_per_step")
            selection_text = "" if selection is None else f"{selection:.2f}"
            link = r.get("link_gb_s")
            link_text = "" if link is None else f"{link:.1f}"
            syncs = r.get("host_syncs_per_step")
            syncs_text = "" if syncs is None else f"{syncs:g}"
            # Recall at the link's rate, serial after the step's own time without it: the bound
            # of one micro-batch (filled in by the reader from the all-resident record).
            bound = "" if link is None else f"+{r['recall_bytes_per_step'] / link / 1e6:.2f} ms"
            print(f"{r['mode']:<22} {r['batch']} x {r['context']:>10} {r['budget']:>7} "
                  f"{slots_text:>7} {r['gpu_kv_cap_gib']:>7.2f} "
                  f"{r['recall_bytes_per_step'] / 1e6:>15.2f} {rate:>12} {link_text:>10} "
                  f"{hits:>10} {selection_text:>8} {syncs_text:>6} {bound:>13}")
    for r in records:
        if r["bench"] == "prefill":
            print(f"prefill {r['context']} tokens (chunks of {r['chunk']}): {r['seconds']:.2f} s, "
                  f"{r['tflops']:.0f} TFLOP/s = {r['peak_fraction']:.0%} of {r['peak_tflops']:.0f}")


if __name__ == "__main__":
    main()
