"""The CUDA backend against the CPU backend on a trained model: SmolLM2-135M-Instruct's GGUF.

hf_crosscheck.py compares against transformers on random weights, whose nearly flat next-token
distributions make greedy continuations part early at near ties; this is the same comparison on
a trained model. Both backends run the same bf16 weights (the GGUF dequantized once): the CPU
backend's logits of every position of tests/gpu/texts/harbour.txt are the reference for CUDA's,
through chunked prefill and token by token; the greedy continuations of a chat prompt are
compared; and the CLI answers a question on each backend as text. Where the `gguf` package is
installed, transformers loads the same file as well, and its fp32 forward pass over the same
bf16-rounded weights is the reference for both backends, with its own bf16 pass beside it.

  python3 gguf_crosscheck.py --model SmolLM2-135M-Instruct.Q4_1.gguf --bin BIN --work DIR \
      --out result.json [--greedy-tokens 64]

BIN holds pulse-dump-logits, pulse-tokenize and pulseinfer. Prints one summary line and writes
the figures as JSON; exits 1 when top-1 disagrees outside near ties (as in hf_crosscheck.py), when
the greedy continuations part anywhere but at a near tie (CUDA computes between ops in bf16, the
CPU in fp32), when the answers differ, or when a relative error of the logits at a position
exceeds 2e-2: CUDA's against the CPU's, or, with transformers, CUDA's against transformers' fp32
unless transformers' own bf16 pass is as far from it.
"""
import argparse
import json
import pathlib
import subprocess
import sys
import time

from logit_compare import (REL_ERROR_BOUND, all_logits, compare, cuda_prefill_and_decode,
                           greedy_on_both_backends, greedy_passed, greedy_summary)

TEXT = pathlib.Path(__file__).parent / "texts" / "harbour.txt"
# SmolLM2-Instruct's chat format (ChatML), written out so that only the tokenizer is involved.
CHAT_PROMPT = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
               "Hugging Face<|im_end|>\n<|im_start|>user\nWrite a short story about a lighthouse "
               "keeper.<|im_end|>\n<|im_start|>assistant\n")
QUESTION = "What is the capital of France?"


def tokenize(bin_dir: pathlib.Path, model: pathlib.Path, text: str, work: pathlib.Path) -> list:
    path = work / "text.txt"
    path.write_text(text)
    out = subprocess.run([str(bin_dir / "pulse-tokenize"), "--gguf", str(model), "--text-file",
                          str(path)], capture_output=True, text=True, check=True).stdout
    return [int(t) for t in out.split()]


def transformers_logits(model: pathlib.Path, prompt: list) -> dict | None:
    """transformers' logits of every position of `prompt` from the GGUF, in fp32 and in bf16 over
    the same bf16-rounded weights; None without the gguf package transformers reads it with."""
    try:
        import gguf  # noqa: F401
    except ImportError:
        return None
    import torch
    import transformers
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        model.parent, gguf_file=model.name, dtype=torch.float32).cuda().eval()
    ids = torch.tensor(prompt, device="cuda")[None, :]
    logits = {}
    with torch.no_grad():
        for parameter in hf.parameters():
            parameter.copy_(parameter.to(torch.bfloat16).float())
        logits["fp32"] = hf(ids).logits[0].float().cpu().numpy()
        hf.to(torch.bfloat16)
        logits["bf16"] = hf(ids).logits[0].float().cpu().numpy()
    logits["version"] = transformers.__version__
    return logits


def answer(bin_dir: pathlib.Path, model: pathlib.Path, backend: str) -> dict:
    command = [str(bin_dir / "pulseinfer"), "generate", "--model", str(model), "--backend",
               backend, "--weight-type", "bf16", "--chat", "--prompt", QUESTION,
               "--max-tokens", "64", "--format", "json", "--quiet"]
    return json.loads(subprocess.run(command, capture_output=True, text=True,
                                     check=True).stdout)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=pathlib.Path, required=True)
    parser.add_argument("--bin", type=pathlib.Path, required=True)
    parser.add_argument("--work", type=pathlib.Path, required=True)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--chunk", type=int, default=96)
    parser.add_argument("--decode-positions", type=int, default=48)
    parser.add_argument("--greedy-tokens", type=int, default=64)
    args = parser.parse_args()

    started = time.time()
    tool = args.bin / "pulse-dump-logits"
    prompt = tokenize(args.bin, args.model, TEXT.read_text(), args.work)
    reference = all_logits(tool, args.model, prompt, args.work / "cpu.f32", "--backend", "cpu",
                           "--weight-type", "bf16")
    prefill, decode = cuda_prefill_and_decode(tool, args.model, prompt, args.work, args.chunk,
                                              args.decode_positions)
    result = {"model": args.model.name, "text": TEXT.name, "prompt": len(prompt),
              "chunk": args.chunk,
              "cuda_prefill_vs_cpu": compare(prefill, reference),
              "cuda_decode_vs_cpu": compare(decode, reference[:len(decode)])}
    hf = transformers_logits(args.model, prompt)
    if hf is None:
        result["transformers"] = "not run: no gguf package"
        bounded = ("cuda_prefill_vs_cpu", "cuda_decode_vs_cpu")
        bound = REL_ERROR_BOUND
    else:
        result["transformers"] = hf["version"]
        result["cpu_vs_hf_fp32"] = compare(reference, hf["fp32"])
        result["cuda_prefill_vs_hf_fp32"] = compare(prefill, hf["fp32"])
        result["cuda_decode_vs_hf_fp32"] = compare(decode, hf["fp32"][:len(decode)])
        result["hf_bf16_vs_hf_fp32"] = compare(hf["bf16"], hf["fp32"])
        bounded = ("cpu_vs_hf_fp32", "cuda_prefill_vs_hf_fp32", "cuda_decode_vs_hf_fp32")
        bound = max(REL_ERROR_BOUND, result["hf_bf16_vs_hf_fp32"]["rel_error_max"])
    result["rel_error_bound"] = bound
    checked = ("cuda_prefill_vs_cpu", "cuda_decode_vs_cpu") + bounded
    passed = all(result[k]["finite"] and result[k]["disagreements_outside_near_ties"] == 0
                 for k in checked)
    passed = passed and all(result[k]["rel_error_max"] <= bound for k in bounded)

    chat = tokenize(args.bin, args.model, CHAT_PROMPT, args.work)
    result["greedy"] = greedy_on_both_backends(tool, args.model, chat, args.greedy_tokens,
                                               args.work)
    passed = passed and greedy_passed(result["greedy"])

    answers = {backend: answer(args.bin, args.model, backend) for backend in ("cuda", "cpu")}
    result["answer"] = {"question": QUESTION, "cuda": answers["cuda"]["text"],
                        "cpu": answers["cpu"]["text"],
                        "identical": answers["cuda"]["tokens"] == answers["cpu"]["tokens"]}
    passed = passed and result["answer"]["identical"]

    result["passed"] = passed
    result["seconds"] = round(time.time() - started, 1)
    args.out.write_text(json.dumps(result, indent=2))
    figures = " | ".join(
        f"{k}: rel.err max {result[k]['rel_error_max']:.2e} "
        f"top-1 {result[k]['top1_agreement']:.3f} "
        f"(near ties {result[k]['near_ties']}, other misses "
        f"{result[k]['disagreements_outside_near_ties']})"
        for k in result if isinstance(result[k], dict) and "rel_error_max" in result[k])
    print(f"{args.model.name} ({len(prompt)} tokens of {TEXT.name}; transformers "
          f"{result['transformers']}; bound {bound:.2e}): {figures} | "
          f"{greedy_summary(result['greedy'])} | answer on CUDA: {result['answer']['cuda']!r} "
          f"(the CPU's: {result['answer']['identical']}) | {'PASS' if passed else 'FAIL'}",
          flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
