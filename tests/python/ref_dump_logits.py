"""Drives bin/pulse-dump-logits and reads what it writes (for the reference comparisons)."""
from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import tempfile
import time

import numpy as np


@dataclasses.dataclass
class DumpResult:
    logits: np.ndarray  # float32 [vocab], the last prompt position
    greedy: list[int]  # the greedy continuation
    seconds: float


def _command(tool: pathlib.Path, model, prompt, weight_type: str, greedy: int,
             chunk: int | None, logits_path: pathlib.Path | None) -> list[str]:
    command = [str(tool), "--model", str(model), "--prompt-ids", ",".join(map(str, prompt)),
               "--weight-type", weight_type]
    if logits_path is not None:
        command += ["--logits", str(logits_path)]
    if greedy:
        command += ["--greedy", str(greedy)]
    if chunk is not None:
        command += ["--chunk", str(chunk)]
    return command


def dump_logits(tool: pathlib.Path, model, prompt, work_dir: pathlib.Path, *,
                weight_type: str = "f32", greedy: int = 0, chunk: int | None = None,
                timeout: float = 300) -> DumpResult:
    handle, name = tempfile.mkstemp(suffix=".f32", dir=work_dir)
    os.close(handle)
    logits_path = pathlib.Path(name)
    start = time.monotonic()
    proc = subprocess.run(_command(tool, model, prompt, weight_type, greedy, chunk, logits_path),
                          capture_output=True, text=True, timeout=timeout)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise AssertionError(f"pulse-dump-logits exited {proc.returncode}:\n{proc.stderr}")
    tokens = []
    if greedy:
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        tokens = [int(t) for t in lines[-1].split(",")]
    return DumpResult(logits=np.fromfile(logits_path, dtype="<f4"), greedy=tokens,
                      seconds=seconds)


def expect_failure(tool: pathlib.Path, model, prompt, timeout: float = 60) -> str:
    """Runs the tool on a broken model; checks it exits cleanly non-zero; returns its output."""
    proc = subprocess.run(_command(tool, model, prompt, "f32", 0, None, None),
                          capture_output=True, text=True, timeout=timeout)
    output = proc.stdout + proc.stderr
    # A negative return code is a signal (a crash), not an error exit.
    assert proc.returncode > 0, f"exit {proc.returncode}, expected an error exit:\n{output}"
    assert "Sanitizer" not in output and "terminate called" not in output, output
    return output


def relative_error(ours: np.ndarray, reference: np.ndarray) -> float:
    ours = np.asarray(ours, dtype=np.float64)
    reference = np.asarray(reference, dtype=np.float64)
    assert ours.shape == reference.shape, (ours.shape, reference.shape)
    return float(np.linalg.norm(ours - reference) / np.linalg.norm(reference))
