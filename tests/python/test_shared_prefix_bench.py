"""pulseinfer-shared-prefix on the CPU with a tiny random-weight Llama: with the prefix cache the
requests after the first share the document's cached blocks (each prefills its question only and
the host tier holds the document once); without it each prefills and holds its own copy. Timings
are reported, not asserted."""
import json
import subprocess

from test_throughput_bench import TINY


def run(tool, tmp_path, *flags):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    out = tmp_path / "shared.jsonl"
    proc = subprocess.run(
        [str(tool("pulseinfer-shared-prefix")), "--model", str(config), "--random-weights",
         "--backend", "cpu", "--document", "1024", "--question", "40", "--budget", "128",
         "--decode-steps", "4", "--prefill-chunk", "512", "--commit", "test", "--out", str(out),
         *flags],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_requests_over_one_document_share_it_with_the_cache(tool, tmp_path):
    records = run(tool, tmp_path, "--requests", "1,4")
    assert [(r["requests"], r["prefix_cache"]) for r in records] == [
        (1, True), (1, False), (4, True), (4, False)]
    for record in records:
        assert record["bench"] == "shared-prefix" and record["fits"], record
        assert record["tokens_per_s"] > 0 and record["timed_steps"] == 4, record
        assert record["ttft_first_ms"] > 0 and record["codec"] == "f32", record
    shared, unshared = records[2], records[3]
    # The three later requests share the document's 1024 tokens.
    assert (shared["prefix_hits"], shared["prefix_hit_tokens"]) == (3, 3 * 1024)
    assert unshared["prefix_hits"] == 0 and unshared["host_blocks_cached"] == 0
    assert shared["prefill_tokens"] == unshared["prefill_tokens"] - 3 * 1024
    # The document is held once: three documents' blocks fewer (the library's offloading blocks).
    assert shared["block_tokens"] == 4
    assert (shared["host_blocks_in_use"]
            == unshared["host_blocks_in_use"] - 3 * 1024 // shared["block_tokens"])
    assert (shared["ttft_others_ms_min"] <= shared["ttft_others_ms_p50"]
            <= shared["ttft_others_ms_max"])
    assert records[0]["ttft_others_ms_p50"] is None
    proc = subprocess.run([str(tool("pulseinfer-shared-prefix")), "--model", "x",
                           "--prefix-cache", "maybe"], capture_output=True, text=True)
    assert proc.returncode == 1 and "--prefix-cache expects on and/or off" in proc.stderr
