"""pulseinfer-throughput on the CPU with a tiny random-weight Llama: at equal KV memory the dense
engine runs the batch its cap allows and the rest wait, an offloaded engine runs them all, no
engine uses more KV memory than its cap, and a cap too small is recorded, not a crash."""
import json
import pathlib
import subprocess
import sys

PLOT = pathlib.Path(__file__).resolve().parents[2] / "samples/bench/plot_throughput.py"

# The tiny Llama of tests/data with a context long enough for the grid.
TINY = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 300,
    "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "tie_word_embeddings": False, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
    "torch_dtype": "float32",
}


def run(tool, tmp_path, *flags, layers=TINY["num_hidden_layers"]):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**TINY, "num_hidden_layers": layers}))
    out = tmp_path / "throughput.jsonl"
    proc = subprocess.run(
        [str(tool("pulseinfer-throughput")), "--model", str(config), "--random-weights",
         "--backend", "cpu", "--budget", "128", "--decode-steps", "6", "--prefill-chunk", "512",
         "--commit", "test", "--out", str(out), *flags],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in out.read_text().splitlines()], proc.stderr


def test_at_equal_kv_memory_offloading_runs_what_dense_cannot(tool, tmp_path):
    # 2 MiB of KV: a 1536-token request and its generated tokens take about 0.8 MB of fp32 KV,
    # so two run densely; offloaded, each keeps its sinks, window, summaries and a budget's slots.
    records, stderr = run(tool, tmp_path, "--kv-mib", "2", "--contexts", "1536", "--concurrency",
                          "4", "--modes", "dense,pulse-offload-every,pulse-no-interrupt")
    dense, offloaded, unsplit = records
    for record in records:
        assert record["bench"] == "throughput" and record["fits"] is True, record
        assert record["kv_memory_bytes"] <= 2 << 20, record
        assert record["tokens_per_s"] > 0 and record["timed_steps"] == 6, record
    assert (dense["mode"], dense["running"], dense["waiting"]) == ("dense", 2, 2)
    assert dense["running_offloaded"] == 0 and dense["budget"] is None
    assert (dense["picks"], offloaded["picks"]) == ("dense", "scores")
    assert (offloaded["running"], offloaded["running_offloaded"], offloaded["waiting"]) == (4, 4, 0)
    assert offloaded["admitted_offloaded"] == 4 and offloaded["recall_bytes_per_step"] > 0
    # What the slots, summaries and staging area leave of 2 MiB holds no 1536-token prompt: each
    # is prefilled staged.
    assert (dense["staged_requests"], offloaded["staged_requests"]) == (0, 4)
    # Without interruption every step runs as one micro-batch; the others choose (on this CPU
    # the recall of a tiny model is seldom long enough to split for).
    assert (unsplit["micro_batches"], unsplit["split_steps"]) == (1, 0)
    assert 0 <= offloaded["split_steps"] <= offloaded["timed_steps"]
    assert 0 <= offloaded["probe_steps"] <= offloaded["timed_steps"]
    assert offloaded["retried_steps"] == 0
    # The host plans the sparse rows' selection each step; a dense step plans none.
    assert offloaded["plan_ms"] > 0 and dense["plan_ms"] == 0, (offloaded, dense)
    # The live table's rows, then the final table: the last line is the last run's.
    assert stderr.splitlines()[-1].split()[:6] == [
        "pulse-no-interrupt", "scores", "f32", "2", "1536", "4"]


def test_at_a_load_the_dense_engine_holds_nothing_is_offloaded(tool, tmp_path):
    # 16 layers: a 1536-token request and its generated tokens take about 6.1 MiB of fp32 KV, so
    # 24 MiB hold three. The offloading engine's tiers for three (slots, the host tier's int4 key
    # summaries, the staging area) take about 4 MiB and its KV cache keeps no summaries, which
    # leaves room for the three resident: it decodes as the dense engine does.
    records, _ = run(tool, tmp_path, "--kv-mib", "24", "--contexts", "1536", "--concurrency", "3",
                     "--modes", "dense,pulse", layers=16)
    dense, pulse = records
    assert (dense["running"], dense["waiting"]) == (3, 0), dense
    assert (pulse["running"], pulse["running_offloaded"], pulse["admitted_resident"]) == (3, 0, 3)
    assert pulse["recall_bytes_per_step"] == 0, pulse


def test_synthetic_picks_are_labelled_and_keep_about_their_reuse(tool, tmp_path):
    records, _ = run(tool, tmp_path, "--kv-mib", "2", "--contexts", "1536", "--concurrency", "2",
                     "--modes", "pulse-offload-every", "--picks", "scores,synthetic:0.9")
    scored, drawn = records
    assert (scored["picks"], drawn["picks"]) == ("scores", "synthetic:0.9")
    # Random weights pick almost anew each step; drawn picks keep most of theirs.
    assert scored["reuse"] < 0.5 < drawn["reuse"] <= 0.95, (scored["reuse"], drawn["reuse"])
    proc = subprocess.run([str(tool("pulseinfer-throughput")), "--model", "x", "--picks",
                           "synthetic:1"], capture_output=True, text=True)
    assert proc.returncode == 1 and "--picks expects scores or synthetic:R" in proc.stderr


def test_micro_batch_settings_are_points_of_the_modes_that_choose(tool, tmp_path):
    records, _ = run(tool, tmp_path, "--kv-mib", "2", "--contexts", "1536", "--concurrency", "4",
                     "--modes", "dense,pulse-no-interrupt,pulse-offload-every",
                     "--micro-batches", "0,2")
    assert [(r["mode"], r["micro_batch_setting"]) for r in records] == [
        ("dense", None), ("pulse-no-interrupt", None), ("pulse-offload-every", 0),
        ("pulse-offload-every", 2)]
    split = records[-1]
    assert (split["micro_batches"], split["split_steps"]) == (2, split["timed_steps"]), split
    assert split["probe_steps"] == 0
    proc = subprocess.run([str(tool("pulseinfer-throughput")), "--model", "x", "--micro-batches",
                           "9"], capture_output=True, text=True)
    assert proc.returncode != 0 and "counts from 0 to 8" in proc.stderr


def test_host_codecs_are_points_of_the_offloaded_modes(tool, tmp_path):
    # Equal drawn picks: the fp8 tier recalls its encodings, a quarter of the f32 blocks and
    # their scales.
    records, _ = run(tool, tmp_path, "--kv-mib", "2", "--contexts", "1536", "--concurrency", "4",
                     "--modes", "dense,pulse-offload-every", "--picks", "synthetic:0.5",
                     "--host-codecs", "raw,fp8")
    assert [(r["mode"], r["codec"]) for r in records] == [
        ("dense", "f32"), ("pulse-offload-every", "f32"), ("pulse-offload-every", "fp8")]
    raw, fp8 = records[1:]
    assert raw["reuse"] == fp8["reuse"], (raw["reuse"], fp8["reuse"])
    assert 0 < fp8["recall_bytes_per_step"] < 0.3 * raw["recall_bytes_per_step"], (raw, fp8)
    proc = subprocess.run([str(tool("pulseinfer-throughput")), "--model", "x", "--host-codecs",
                           "int8"], capture_output=True, text=True)
    assert proc.returncode == 1 and "--host-codecs expects raw and/or fp8" in proc.stderr


def test_a_cap_that_holds_no_request_is_recorded_as_not_fitting(tool, tmp_path):
    records, _ = run(tool, tmp_path, "--kv-mib", "1", "--contexts", "4096", "--concurrency", "2",
                     "--modes", "dense,pulse")
    assert [record["fits"] for record in records] == [False, False]
    assert all(record["error"] for record in records)


def test_the_plot_draws_a_panel_a_cell_and_refuses_an_empty_selection(tool, tmp_path):
    records, _ = run(tool, tmp_path, "--kv-mib", "2", "--contexts", "1024", "--concurrency",
                     "2,3", "--modes", "dense,pulse-offload-every")
    assert [(r["mode"], r["concurrency"]) for r in records if r["fits"]] == [
        ("dense", 2), ("pulse-offload-every", 2), ("dense", 3), ("pulse-offload-every", 3)]
    png = tmp_path / "throughput.png"
    proc = subprocess.run([sys.executable, str(PLOT), str(tmp_path / "throughput.jsonl"), str(png),
                           "--commit", "test"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    proc = subprocess.run([sys.executable, str(PLOT), str(tmp_path / "throughput.jsonl"),
                           str(tmp_path / "none.png"), "--commit", "other"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "no throughput records that fit" in proc.stderr
