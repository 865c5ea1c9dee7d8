"""What the GPU cross-checks share: running pulse-dump-logits, comparing two sets of per-position
logits, and comparing the CUDA and CPU backends' greedy continuations."""
import pathlib
import subprocess

import numpy as np

# The largest relative error of one position's logits either cross-check accepts by default.
REL_ERROR_BOUND = 2e-2


def run_tool(tool: pathlib.Path, model: pathlib.Path, prompt, *args) -> str:
    command = [str(tool), "--model", str(model), "--prompt-ids",
               ",".join(str(int(t)) for t in prompt), *map(str, args)]
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:3])} ... failed:\n{proc.stderr}")
    return proc.stdout


def all_logits(tool: pathlib.Path, model: pathlib.Path, prompt, path: pathlib.Path,
               *args) -> np.ndarray:
    """The logits of every position of `prompt` ([len(prompt), vocab] float32)."""
    run_tool(tool, model, prompt, *args, "--all-logits", path)
    return np.fromfile(path, dtype=np.float32).reshape(len(prompt), -1)


def cuda_prefill_and_decode(tool: pathlib.Path, model: pathlib.Path, prompt, work: pathlib.Path,
                            chunk: int, decode_positions: int) -> tuple[np.ndarray, np.ndarray]:
    """CUDA's logits of every position of `prompt` through prefill in `chunk`-token chunks (the
    flash prefill kernel, earlier chunks in the cache), and of its first `decode_positions`
    token by token (the decode kernel)."""
    prefill = all_logits(tool, model, prompt, work / "prefill.f32", "--backend", "cuda", "--chunk",
                         chunk)
    decode = all_logits(tool, model, prompt[:decode_positions], work / "decode.f32", "--backend",
                        "cuda", "--chunk", 1)
    return prefill, decode


def compare(ours: np.ndarray, reference: np.ndarray) -> dict:
    """Per-position relative error and top-1 agreement. A position is a near tie when the
    reference's top-2 margin is within twice our largest absolute error there: no implementation
    within that error can be expected to pick the reference's top-1 there."""
    ours64 = ours.astype(np.float64)
    diff = ours64 - reference
    rel = np.linalg.norm(diff, axis=1) / np.linalg.norm(reference.astype(np.float64), axis=1)
    agree = ours.argmax(axis=1) == reference.argmax(axis=1)
    top2 = np.sort(reference, axis=1)[:, -2:]
    near_tie = (top2[:, 1] - top2[:, 0]) <= 2 * np.abs(diff).max(axis=1)
    return {"rel_error_max": float(rel.max()), "rel_error_median": float(np.median(rel)),
            "top1_agreement": float(np.mean(agree)), "positions": int(len(rel)),
            "near_ties": int(near_tie.sum()),
            "disagreements_outside_near_ties": int(np.sum(~agree & ~near_tie)),
            "finite": bool(np.isfinite(ours).all())}


def greedy_on_both_backends(tool: pathlib.Path, model: pathlib.Path, prompt, tokens: int,
                            work: pathlib.Path) -> dict:
    """The greedy continuations of `prompt` on CUDA and on the CPU (bf16 weights, as CUDA's).
    Where they part, both backends' logits after the common prefix say whether the CPU's margin
    between its token and CUDA's is within twice the largest difference between the two
    backends' logits there (a near tie, as in compare())."""
    cuda = run_tool(tool, model, prompt, "--backend", "cuda", "--greedy", tokens).strip()
    cpu = run_tool(tool, model, prompt, "--backend", "cpu", "--weight-type", "bf16", "--greedy",
                   tokens).strip()
    cuda_tokens, cpu_tokens = cuda.split(","), cpu.split(",")
    same = [a == b for a, b in zip(cuda_tokens, cpu_tokens)]
    greedy = {"tokens": tokens, "cuda": cuda_tokens, "cpu": cpu_tokens,
              "identical": all(same) and len(cuda_tokens) == len(cpu_tokens),
              "first_difference": same.index(False) if not all(same) else None}
    step = greedy["first_difference"]
    if step is None:
        return greedy
    prefix = list(prompt) + [int(t) for t in cpu_tokens[:step]]
    last = {}
    for backend, flags in (("cuda", ["--chunk", 1]), ("cpu", ["--weight-type", "bf16"])):
        logits = all_logits(tool, model, prefix, work / f"divergence-{backend}.f32", "--backend",
                            backend, *flags)
        last[backend] = logits[-1].astype(np.float64)
    ours, theirs = int(cuda_tokens[step]), int(cpu_tokens[step])
    margin = float(last["cpu"][theirs] - last["cpu"][ours])
    max_diff = float(np.abs(last["cuda"] - last["cpu"]).max())
    greedy["divergence"] = {"step": step, "cpu_token": theirs, "cuda_token": ours,
                            "cpu_margin": margin, "max_abs_logit_difference": max_diff,
                            "near_tie": margin <= 2 * max_diff}
    return greedy


def greedy_passed(greedy: dict) -> bool:
    """Identical, or parted where the two backends' logits cross (a near tie)."""
    return greedy["identical"] or (len(greedy["cuda"]) == len(greedy["cpu"]) and
                                   greedy["divergence"]["near_tie"])


def greedy_summary(greedy: dict) -> str:
    line = f"greedy {greedy['tokens']} identical: {greedy['identical']}"
    if "divergence" in greedy:
        d = greedy["divergence"]
        line += (f" (parted at step {d['step']}, CPU margin {d['cpu_margin']:.2e} against a logit "
                 f"difference of {d['max_abs_logit_difference']:.2e}: "
                 f"{'a near tie' if d['near_tie'] else 'NOT a tie'})")
    return line
