"""The pulseinfer command: info, generate and chat on SmolLM2 and on a tiny random model, its
output formats, and its usage errors."""
from __future__ import annotations

import json
import os
import pathlib
import pty
import re
import select
import subprocess
import time

import pytest

import hf_writer
import ref_dump_logits

# "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n" in
# SmolLM2's vocabulary (the same ids as scripts/demo).
CHAT_PROMPT = [1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198]
# "The capital of France is Paris." and <|im_end|>.
PARIS_ANSWER = [504, 3575, 282, 4649, 314, 7042, 30, 2]
GREEDY_TOKENS = 12


def run(cli: pathlib.Path, *args, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(cli), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)
    output = proc.stdout + proc.stderr
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}:\n{output}"
    assert "Sanitizer" not in output and "terminate called" not in output, output
    return proc


def info_fields(stdout: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in stdout.splitlines() if ": " in line)


@pytest.fixture(scope="module")
def cli(tool) -> pathlib.Path:
    return tool("pulseinfer")


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory) -> pathlib.Path:
    directory = tmp_path_factory.mktemp("tiny")
    path = directory / "config.json"
    path.write_text(json.dumps(hf_writer.config_json(hf_writer.Spec())))
    return path


@pytest.fixture(scope="module")
def smollm2_greedy_ids(cli, smollm2_path) -> list[int]:
    proc = run(cli, "generate", "--model", smollm2_path, "--prompt-ids",
               ",".join(map(str, CHAT_PROMPT)), "--max-tokens", GREEDY_TOKENS, "--temperature",
               0, "--ignore-eos", "--format", "ids", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    return [int(t) for t in proc.stdout.strip().split(",")]


def test_info_on_smollm2(cli, smollm2_path):
    proc = run(cli, "info", "--model", smollm2_path, "--quiet")
    assert proc.returncode == 0, proc.stderr
    fields = info_fields(proc.stdout)
    assert fields["architecture"] == "llama"
    assert fields["format"] == "gguf"
    assert fields["stored type"] == "Q4_1"
    assert fields["layers"] == "30"
    assert fields["hidden size"] == "576"
    assert fields["intermediate size"] == "1536"
    assert fields["heads"] == "9"
    assert fields["kv heads"] == "3"
    assert fields["head dim"] == "64"
    assert fields["vocab"] == "49152"
    assert fields["context"] == "8192"
    assert fields["tied embeddings"] == "yes"
    assert fields["parameters"] == "134515008"
    assert fields["weight type"] == "quantized"  # the CPU's default for a file of blocks
    assert fields["backend"] == "cpu"
    proc = run(cli, "info", "--model", smollm2_path, "--quiet", "--weight-type", "f32")
    assert info_fields(proc.stdout)["weight type"] == "f32"


def test_info_reports_progress_unless_quiet(cli, tiny_config):
    proc = run(cli, "info", "--model", tiny_config, "--random-weights")
    assert proc.returncode == 0, proc.stderr
    assert "loading" in proc.stderr and "loaded in" in proc.stderr
    assert info_fields(proc.stdout)["format"] == "random"
    assert info_fields(proc.stdout)["ranks"] == "1"
    split = run(cli, "info", "--model", tiny_config, "--random-weights", "--tensor-parallel", 2)
    assert split.returncode == 0, split.stderr
    assert info_fields(split.stdout)["ranks"] == "2"


def test_generate_greedy_ids_match_the_reference_tool(smollm2_greedy_ids, build_dir, smollm2_path,
                                                      tmp_path):
    assert len(smollm2_greedy_ids) == GREEDY_TOKENS
    assert all(0 <= t < 49152 for t in smollm2_greedy_ids)
    dump_tool = build_dir / "bin" / "pulse-dump-logits"
    if not dump_tool.exists():
        pytest.skip("pulse-dump-logits is not built")
    reference = ref_dump_logits.dump_logits(dump_tool, smollm2_path, CHAT_PROMPT, tmp_path,
                                            greedy=GREEDY_TOKENS)
    assert smollm2_greedy_ids == reference.greedy


def test_generate_json_matches_ids(cli, smollm2_path, smollm2_greedy_ids):
    proc = run(cli, "generate", "--model", smollm2_path, "--prompt-ids",
               " ".join(map(str, CHAT_PROMPT)), "--max-tokens", GREEDY_TOKENS, "--ignore-eos",
               "--format", "json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["tokens"] == smollm2_greedy_ids
    assert result["prompt_tokens"] == len(CHAT_PROMPT)
    assert result["generated_tokens"] == GREEDY_TOKENS
    assert result["finish_reason"] == "max_tokens"
    assert result["ttft_ms"] > 0 and result["total_ms"] >= result["ttft_ms"]


def test_generate_json_stays_valid_when_generation_stops_inside_a_character(cli, smollm2_path):
    # SmolLM2's second token here is the first two bytes of a three-byte character.
    proc = subprocess.run([str(cli), "generate", "--model", str(smollm2_path), "--prompt",
                           "用中文回答：你好", "--max-tokens", "2", "--format", "json", "--quiet"],
                          capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.decode("utf-8"))  # strict: JSON text is Unicode
    assert result["generated_tokens"] == 2
    assert result["text"].endswith("\ufffd"), result["text"]


def test_generate_answers_and_stops_at_end_of_sequence(cli, smollm2_path, smollm2_greedy_ids):
    proc = run(cli, "generate", "--model", smollm2_path, "--prompt-ids",
               ",".join(map(str, CHAT_PROMPT)), "--max-tokens", 48, "--format", "json",
               "--quiet")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["tokens"] == PARIS_ANSWER
    assert result["tokens"] == smollm2_greedy_ids[:len(PARIS_ANSWER)]
    assert result["finish_reason"] == "stop_token"


def test_generate_reports_progress_and_a_summary(cli, tiny_config):
    proc = run(cli, "generate", "--model", tiny_config, "--random-weights", "--prompt-ids",
               "5,6,7,8", "--max-tokens", 6, "--ignore-eos")
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.strip().split(",")) == 6
    assert "prefill 4/4 tokens" in proc.stderr
    assert "6 tokens in" in proc.stderr and "finished: max_tokens" in proc.stderr


def test_sampling_is_seeded(cli, tiny_config):
    def sample(seed: int) -> str:
        proc = run(cli, "generate", "--model", tiny_config, "--random-weights", "--prompt-ids",
                   "5,6,7", "--max-tokens", 16, "--ignore-eos", "--temperature", 1.0, "--top-k",
                   50, "--top-p", 0.9, "--seed", seed, "--quiet")
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert sample(1) == sample(1)
    assert sample(1) != sample(2)


def test_a_model_over_two_ranks_samples_the_one_rank_ids(cli, tiny_config):
    def sample(*flags) -> str:
        proc = run(cli, "generate", "--model", tiny_config, "--random-weights", "--prompt-ids",
                   "5,6,7,8,9", "--max-tokens", 12, "--ignore-eos", "--temperature", 0.9,
                   "--seed", 3, "--threads", 2, "--quiet", *flags)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert sample("--tensor-parallel", 2) == sample()
    proc = run(cli, "generate", "--model", tiny_config, "--random-weights", "--prompt-ids", "5",
               "--tensor-parallel", 3)
    assert proc.returncode != 0 and "tensor_parallel_size" in proc.stderr


def test_text_format_without_a_tokenizer_prints_ids(cli, tiny_config):
    proc = run(cli, "generate", "--model", tiny_config, "--random-weights", "--prompt-ids",
               "5,6,7", "--max-tokens", 4, "--ignore-eos", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.strip().split(",")) == 4


def test_text_prompt_needs_a_tokenizer(cli, tiny_config):
    proc = run(cli, "generate", "--model", tiny_config, "--random-weights", "--prompt", "Hello")
    assert proc.returncode == 2
    assert "the model has no tokenizer" in proc.stderr
    assert "--prompt-ids" in proc.stderr


def test_generate_text_prompt_through_the_chat_template(cli, smollm2_path):
    proc = run(cli, "generate", "--model", smollm2_path, "--chat", "--prompt",
               "What is the capital of France?", "--max-tokens", 48, "--format", "json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["text"] == "The capital of France is Paris."
    assert result["tokens"] == PARIS_ANSWER
    # The default system message of SmolLM2's template, then the user turn.
    assert result["prompt_tokens"] > len(CHAT_PROMPT)


def test_generate_streams_text_and_stops_at_a_stop_string(cli, smollm2_path):
    proc = run(cli, "generate", "--model", smollm2_path, "--chat", "--prompt",
               "What is the capital of France?", "--stop", " Paris", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "The capital of France is\n"


def test_generate_raw_text_prompt(cli, smollm2_path):
    proc = run(cli, "generate", "--model", smollm2_path, "--prompt",
               "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
               "<|im_start|>assistant\n", "--max-tokens", 48, "--format", "json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["prompt_tokens"] == len(CHAT_PROMPT)
    assert result["tokens"] == PARIS_ANSWER
    assert result["text"] == "The capital of France is Paris."


def test_chat_through_a_pipe_answers_every_line(cli, smollm2_path):
    lines = "What is the capital of France?\n\nWhat is 2 + 2?\n"
    proc = subprocess.run([str(cli), "chat", "--model", str(smollm2_path), "--max-tokens", "32",
                           "--quiet"], input=lines, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    replies = proc.stdout.splitlines()
    assert len(replies) >= 2, proc.stdout
    assert replies[0] == "The capital of France is Paris."
    assert replies[1].strip() != ""  # (the 135M model's arithmetic is not under test)
    assert "> " not in proc.stdout  # no prompt when stdin is not a terminal


def test_chat_under_a_terminal_prompts_streams_and_ends_at_ctrl_d(cli, smollm2_path):
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([str(cli), "chat", "--model", str(smollm2_path), "--max-tokens", "32",
                             "--quiet"], stdin=terminal, stdout=terminal, stderr=subprocess.PIPE)
    os.close(terminal)
    seen = bytearray()

    def read_until(marker: bytes, count: int = 1) -> None:
        deadline = time.monotonic() + 120
        while seen.count(marker) < count:
            assert time.monotonic() < deadline, f"no {marker!r} in {bytes(seen)!r}"
            if select.select([controller], [], [], 1)[0]:
                seen.extend(os.read(controller, 4096))

    try:
        read_until(b"> ")
        os.write(controller, b"What is the capital of France?\n")
        read_until(b"> ", 2)  # the answer, then the next prompt
        os.write(controller, b"\x04")  # Ctrl-D on an empty line: end of input
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    finally:
        proc.kill()
        os.close(controller)
    transcript = bytes(seen).decode().replace("\r\n", "\n")
    assert transcript.startswith("> What is the capital of France?\n")  # the prompt, the echo
    assert "\nThe capital of France is Paris.\n> " in transcript
    assert proc.stderr.read() == b""


def test_chat_keeps_the_history_within_the_context(cli, smollm2_path):
    # Each turn with SmolLM2's template and a 32-token reply needs about 80 tokens: a context of
    # 160 forces the oldest turns out, and every line still gets an answer.
    lines = "".join(f"Say the number {n}.\n" for n in range(6))
    proc = subprocess.run([str(cli), "chat", "--model", str(smollm2_path), "--max-tokens", "32",
                           "--context", "160", "--quiet"], input=lines, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert len([line for line in proc.stdout.splitlines() if line]) >= 6, proc.stdout


def test_chat_without_a_template_is_a_clear_error(cli, tiny_config):
    proc = subprocess.run([str(cli), "chat", "--model", str(tiny_config), "--random-weights",
                           "--quiet"], input="hi\n", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "no usable chat template (not found)" in proc.stderr


@pytest.mark.parametrize("args, message", [
    ([], "usage: pulseinfer COMMAND"),
    (["frobnicate"], "unknown command 'frobnicate'"),
    (["info"], "--model is required"),
    (["info", "--model"], "--model needs a value"),
    (["info", "--model", "x", "--bogus"], "unknown argument '--bogus'"),
    (["generate", "--model", "x"], "either --prompt or --prompt-ids"),
    (["generate", "--model", "x", "--prompt", "a", "--prompt-ids", "1"], "either --prompt"),
    (["generate", "--model", "x", "--prompt", "a", "--system", "s"], "--system needs --chat"),
    (["generate", "--model", "x", "--prompt-ids", "1", "--chat"], "need --prompt TEXT"),
    (["chat"], "--model is required"),
    (["chat", "--model", "x", "--context", "1"], "--context expects an integer"),
    (["generate", "--model", "x", "--prompt-ids", "1,a"], "expects token ids"),
    (["generate", "--model", "x", "--prompt-ids", "1", "--max-tokens", "abc"],
     "--max-tokens expects an integer"),
    (["generate", "--model", "x", "--prompt-ids", "1", "--max-tokens", "-3"],
     "--max-tokens expects an integer"),
    (["generate", "--model", "x", "--prompt-ids", "1", "--top-p", "2"],
     "--top-p expects a number in [0, 1]"),
    (["generate", "--model", "x", "--prompt-ids", "1", "--temperature=nan"],
     "--temperature expects a number"),
    (["generate", "--model", "x", "--prompt-ids", "1", "--format", "xml"],
     "--format expects ids, text or json"),
    (["generate", "--model", "x", "--prompt-ids", "1", "--ignore-eos=1"], "takes no value"),
])
def test_bad_usage_exits_2(cli, args, message):
    proc = run(cli, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr


@pytest.mark.parametrize("command", ["info", "generate", "chat"])
def test_help(cli, command):
    proc = run(cli, command, "--help")
    assert proc.returncode == 0
    assert proc.stdout.startswith(f"usage: pulseinfer {command}")
    assert "--model PATH" in proc.stdout


def test_version(cli):
    proc = run(cli, "version")
    assert proc.returncode == 0
    assert proc.stdout.startswith("libpulseinfer ") and "(ABI 0)" in proc.stdout
    assert "cpu" in proc.stdout


def test_missing_model_is_a_clear_error(cli, tmp_path):
    missing = tmp_path / "missing.gguf"
    proc = run(cli, "generate", "--model", missing, "--prompt-ids", "1,2", "--quiet")
    assert proc.returncode == 1
    assert "cannot load the model (not found)" in proc.stderr
    assert str(missing) in proc.stderr


def test_not_a_model_is_a_clear_error(cli, tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not weights\n")
    proc = run(cli, "info", "--model", path, "--quiet")
    assert proc.returncode == 1
    assert "cannot load the model (invalid model)" in proc.stderr


def test_token_outside_the_vocabulary_is_a_clear_error(cli, tiny_config):
    proc = run(cli, "generate", "--model", tiny_config, "--random-weights", "--prompt-ids",
               "5,300", "--quiet")
    assert proc.returncode == 1
    assert "cannot submit the prompt (invalid argument)" in proc.stderr


def test_offload_with_a_budget_covering_the_context_generates_the_dense_ids(
        cli, smollm2_path, smollm2_greedy_ids):
    for mode in ("solohead", "headwise"):
        proc = run(cli, "generate", "--model", smollm2_path, "--prompt-ids",
                   ",".join(map(str, CHAT_PROMPT)), "--max-tokens", GREEDY_TOKENS,
                   "--ignore-eos", "--format", "ids", "--offload", mode, "--admission", "every",
                   "--budget", 4096)
        assert proc.returncode == 0, proc.stderr
        assert [int(t) for t in proc.stdout.strip().split(",")] == smollm2_greedy_ids
        assert "sparse attention:" in proc.stderr and "100.0% of the context" in proc.stderr


def test_a_prompt_longer_than_the_kv_cache_is_prefilled_staged_with_the_dense_ids(
        cli, shakespeare_path, smollm2_path):
    prompt = shakespeare_path.read_text()[:3000]
    common = ("generate", "--model", smollm2_path, "--prompt", prompt, "--max-tokens", 8,
              "--ignore-eos", "--format", "ids", "--prefill-chunk", 200)
    dense = run(cli, *common)
    assert dense.returncode == 0, dense.stderr
    # 256 tokens of KV cache hold the sinks and window, not the 700-odd tokens of the prompt.
    staged = run(cli, *common, "--offload", "solohead", "--admission", "every", "--budget", 4096,
                 "--kv-tokens", 256)
    assert staged.returncode == 0, staged.stderr
    assert staged.stdout == dense.stdout
    assert "staged prefill: 1 prompts longer than the KV cache" in staged.stderr, staged.stderr


def test_adaptive_admission_runs_a_request_that_fits_resident(cli, shakespeare_path, smollm2_path):
    prompt = shakespeare_path.read_text()[:3000]
    proc = run(cli, "generate", "--model", smollm2_path, "--prompt", prompt, "--max-tokens", 8,
               "--offload", "solohead", "--budget", 256)
    assert proc.returncode == 0, proc.stderr
    assert "admission: 1 requests resident, 0 offloaded" in proc.stderr, proc.stderr
    assert "sparse attention:" not in proc.stderr
    proc = run(cli, "generate", "--model", smollm2_path, "--prompt", "Hi", "--max-tokens", 1,
               "--offload", "solohead", "--admission", "some")
    assert proc.returncode == 1
    assert "--admission expects adaptive or every, got 'some'" in proc.stderr
    # A least budget: nothing to lower for a request that fits; above the budget, refused.
    proc = run(cli, "generate", "--model", smollm2_path, "--prompt", prompt, "--max-tokens", 8,
               "--offload", "solohead", "--budget", 256, "--min-budget", 64)
    assert proc.returncode == 0, proc.stderr
    assert "admission: 1 requests resident, 0 offloaded" in proc.stderr, proc.stderr
    assert "lowered" not in proc.stderr
    proc = run(cli, "generate", "--model", smollm2_path, "--prompt", "Hi", "--max-tokens", 1,
               "--offload", "solohead", "--budget", 256, "--min-budget", 512)
    assert proc.returncode != 0
    assert "offload_min_budget_tokens" in proc.stderr, proc.stderr


def test_the_prefix_cache_is_a_setting_and_reports_what_it_keeps(cli, smollm2_path):
    # One request: nothing to share, but its prompt's full blocks are cached once it decodes.
    proc = run(cli, "generate", "--model", smollm2_path, "--prompt", "Once upon a time " * 40,
               "--max-tokens", 4, "--offload", "solohead", "--admission", "every",
               "--prefix-cache", "on")
    assert proc.returncode == 0, proc.stderr
    line = next(l for l in proc.stderr.splitlines() if l.startswith("prefix cache:"))
    assert line.startswith("prefix cache: 0 requests started from cached blocks"), line
    assert int(line.split("; ")[1].split()[0]) > 0, line
    proc = run(cli, "generate", "--model", smollm2_path, "--prompt", "Hi", "--max-tokens", 1,
               "--offload", "solohead", "--prefix-cache", "yes")
    assert proc.returncode == 1
    assert "--prefix-cache expects on or off, got 'yes'" in proc.stderr


def test_an_fp8_host_tier_writes_back_about_a_quarter_of_the_bytes(cli, shakespeare_path,
                                                                   smollm2_path):
    # The CPU backend's KV is f32: fp8 keeps a byte a value and the scales of each block.
    prompt = shakespeare_path.read_text()[:3000]
    written = {}
    for codec in ("raw", "fp8"):
        proc = run(cli, "generate", "--model", smollm2_path, "--prompt", prompt, "--max-tokens", 8,
                   "--offload", "solohead", "--admission", "every", "--budget", 256,
                   "--host-codec", codec)
        assert proc.returncode == 0, proc.stderr
        line = next(l for l in proc.stderr.splitlines() if l.startswith("recall:"))
        written[codec] = float(line.split("; ")[-1].split(" MiB")[0])
    assert 0.25 < written["fp8"] / written["raw"] < 0.27, written
    proc = run(cli, "generate", "--model", smollm2_path, "--prompt", "Hi", "--max-tokens", 1,
               "--offload", "solohead", "--host-codec", "fp4")
    assert proc.returncode == 1
    assert "--host-codec expects raw or fp8, got 'fp4'" in proc.stderr


def test_offload_with_a_small_budget_attends_to_part_of_the_context(cli, shakespeare_path,
                                                                     smollm2_path):
    prompt = shakespeare_path.read_text()[:3000]
    proc = run(cli, "generate", "--model", smollm2_path, "--prompt", prompt, "--max-tokens", 8,
               "--offload", "solohead", "--admission", "every", "--budget", 256, "--sink", 32,
               "--window", 64)
    assert proc.returncode == 0, proc.stderr
    line = next(l for l in proc.stderr.splitlines() if l.startswith("sparse attention:"))
    attended = float(line.split("selections, ")[1].split("%")[0])
    assert 0 < attended < 40, line


def test_offload_at_small_blocks_and_either_summary_radius(cli, shakespeare_path, smollm2_path):
    prompt = shakespeare_path.read_text()[:3000]
    picked = {}
    for radius in (0, 1):
        proc = run(cli, "generate", "--model", smollm2_path, "--prompt", prompt, "--max-tokens",
                   8, "--offload", "solohead", "--admission", "every", "--budget", 256, "--sink", 8,
                   "--window", 32, "--block-tokens", 8, "--summary-radius", radius)
        assert proc.returncode == 0, proc.stderr
        line = next(l for l in proc.stderr.splitlines() if l.startswith("sparse attention:"))
        # A budget of 256 is 32 blocks of 8 tokens (8 of 32), so over 16 picks a selection
        # beyond the sink and window blocks say that --block-tokens took effect.
        selections = int(re.search(r"sparse attention: (\d+) selections", line).group(1))
        picked[radius] = int(re.search(r"attended, (\d+) of \d+ scored blocks", line).group(1))
        assert picked[radius] > 16 * selections, line
    assert picked[0] == picked[1]  # the same budget; which blocks differs
    proc = run(cli, "generate", "--model", smollm2_path, "--prompt", "Hi", "--max-tokens", 1,
               "--summary-radius", 2)
    assert proc.returncode == 2 and "--summary-radius expects a number in [0, 1]" in proc.stderr


def test_offload_with_boxes_and_rounded_summaries(cli, shakespeare_path, smollm2_path):
    prompt = shakespeare_path.read_text()[:3000]
    for boxes, precision in ((4, "int8"), (0, "bf16")):
        proc = run(cli, "generate", "--model", smollm2_path, "--prompt", prompt, "--max-tokens",
                   8, "--offload", "solohead", "--admission", "every", "--budget", 256, "--sink", 32,
                   "--window", 64, "--summary-boxes", boxes, "--summary-precision", precision)
        assert proc.returncode == 0, proc.stderr
        line = next(l for l in proc.stderr.splitlines() if l.startswith("sparse attention:"))
        attended = float(line.split("selections, ")[1].split("%")[0])
        assert 0 < attended < 40, line


def test_summary_boxes_and_precision_must_be_valid(cli, tiny_config):
    generate = ("generate", "--model", tiny_config, "--random-weights", "--prompt-ids", "1,2,3",
                "--offload", "solohead")
    proc = run(cli, *generate, "--summary-boxes", 5)
    assert proc.returncode == 1
    assert "pulse_engine_params.offload_summary_boxes is 5" in proc.stderr
    proc = run(cli, *generate, "--summary-boxes", -1)
    assert proc.returncode == 2 and "--summary-boxes expects an integer in [0, " in proc.stderr
    proc = run(cli, *generate, "--summary-precision", "fp8")
    assert proc.returncode == 1
    assert "--summary-precision expects f32, bf16, int8 or int4, got 'fp8'" in proc.stderr
    usage = run(cli, "generate", "--help").stdout
    assert "--summary-boxes N" in usage and "int4 (default int4)" in usage, usage


def test_offload_mode_must_be_known(cli, tiny_config):
    proc = run(cli, "generate", "--model", tiny_config, "--random-weights", "--prompt-ids",
               "1,2,3", "--offload", "everything")
    assert proc.returncode == 1
    assert "--offload expects off, solohead or headwise" in proc.stderr
