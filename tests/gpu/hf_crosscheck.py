"""The CUDA backend end to end against Hugging Face transformers, on random weights.

transformers builds a random Llama-family model from one of configs/ (fp32, its own seeded
initialisation), rounds every weight to bf16 and saves it as safetensors; the reference is
transformers' fp32 forward pass over those bf16 weights, and its bf16 forward pass is reported
beside it. pulse-dump-logits then loads the saved directory on the CUDA backend and dumps the
logits of every prompt position: once through prefill in chunks (the flash prefill kernel, with
earlier chunks in the cache) and once token by token (the decode kernel). With --greedy-tokens,
the greedy continuation on CUDA is compared with the CPU backend's on the same weights; where
the two part, the step must be a near tie (below) in both backends' logits after the common prefix.

  python3 hf_crosscheck.py --config configs/smollm2-135m.json --tool BIN/pulse-dump-logits \
      --work DIR --out result.json [--layers N] [--prompt 256] [--greedy-tokens 64]

Prints one summary line and writes the figures as JSON; exits 1 when a bound is missed on either
path: a per-position relative error of the logits above 2e-2, or a top-1 agreement under 99%
that is not explained by near ties (positions whose reference top-2 margin is within twice our
largest error there; random-weight models over a 128K vocabulary have many).
"""
import argparse
import json
import pathlib
import sys
import time

import numpy as np
import torch
import transformers

from logit_compare import (REL_ERROR_BOUND, compare, cuda_prefill_and_decode,
                           greedy_on_both_backends, greedy_passed, greedy_summary)

TOP1_BOUND = 0.99


def build_model(config_path: pathlib.Path, layers: int | None, seed: int):
    spec = json.loads(config_path.read_text())
    if layers is not None:
        spec["num_hidden_layers"] = layers
    config = transformers.LlamaConfig(**spec)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(config).float().eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(parameter.to(torch.bfloat16).float())
    return model


def logits_of(model, prompt: np.ndarray) -> np.ndarray:
    ids = torch.from_numpy(prompt).long().cuda()[None, :]
    with torch.no_grad():
        return model(ids).logits[0].float().cpu().numpy()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", type=pathlib.Path, required=True)
    parser.add_argument("--tool", type=pathlib.Path, required=True)
    parser.add_argument("--work", type=pathlib.Path, required=True)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--layers", type=int)
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--decode-positions", type=int, default=48)
    parser.add_argument("--chunk", type=int, default=96)
    parser.add_argument("--greedy-tokens", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    started = time.time()
    model = build_model(args.config, args.layers, args.seed)
    vocab = model.config.vocab_size
    prompt = np.random.default_rng(args.seed).integers(0, vocab, args.prompt)
    reference = logits_of(model, prompt)
    model_dir = args.work / "model"
    model.to(torch.bfloat16)
    model.save_pretrained(model_dir)
    hf_bf16 = logits_of(model, prompt)
    del model
    torch.cuda.empty_cache()

    prefill, decode = cuda_prefill_and_decode(args.tool, model_dir, prompt, args.work, args.chunk,
                                              args.decode_positions)

    result = {
        "config": args.config.name, "layers": args.layers, "prompt": args.prompt,
        "chunk": args.chunk, "transformers": transformers.__version__,
        "torch": torch.__version__, "device": torch.cuda.get_device_name(),
        "cuda_prefill_vs_hf_fp32": compare(prefill, reference),
        "cuda_decode_vs_hf_fp32": compare(decode, reference[:len(decode)]),
        "hf_bf16_vs_hf_fp32": compare(hf_bf16, reference),
        "cuda_prefill_vs_hf_bf16": compare(prefill, hf_bf16),
    }
    checked = ["cuda_prefill_vs_hf_fp32", "cuda_decode_vs_hf_fp32"]
    passed = all(result[k]["finite"] and result[k]["rel_error_max"] <= REL_ERROR_BOUND and
                 (result[k]["top1_agreement"] >= TOP1_BOUND or
                  result[k]["disagreements_outside_near_ties"] == 0) for k in checked)

    if args.greedy_tokens > 0:
        result["greedy"] = greedy_on_both_backends(args.tool, model_dir, prompt[:32],
                                                   args.greedy_tokens, args.work)
        passed = passed and greedy_passed(result["greedy"])

    result["passed"] = passed
    result["seconds"] = round(time.time() - started, 1)
    args.out.write_text(json.dumps(result, indent=2))
    p, d = result["cuda_prefill_vs_hf_fp32"], result["cuda_decode_vs_hf_fp32"]
    b = result["hf_bf16_vs_hf_fp32"]
    layers = "" if args.layers is None else f" ({args.layers} layers)"
    print(f"{args.config.stem}{layers}: "
          f"prefill rel.err max {p['rel_error_max']:.2e} top-1 {p['top1_agreement']:.3f} "
          f"(near ties {p['near_ties']}, other misses {p['disagreements_outside_near_ties']}) | "
          f"decode rel.err max {d['rel_error_max']:.2e} top-1 {d['top1_agreement']:.3f} "
          f"(near ties {d['near_ties']}, other misses {d['disagreements_outside_near_ties']}) | "
          f"HF bf16 rel.err max {b['rel_error_max']:.2e} top-1 {b['top1_agreement']:.3f}"
          + (f" | {greedy_summary(result['greedy'])}" if args.greedy_tokens else "")
          + f" | {'PASS' if passed else 'FAIL'}", flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
