"""The peer: Hugging Face transformers' decode step on the same shapes, as JSON Lines.

A random bf16 model from a config.json (transformers' own initialisation), SDPA attention, its
default GPU cache (DynamicCache). Per BATCHxCONTEXT: one prefill of random prompts, then
--steps greedy decode steps, each timed with CUDA events (model forward plus argmax, the loop
generate() runs); TPOT is the median after two warm-up steps. Out-of-memory is a record too.

  python3 hf_decode.py --config ../../tests/gpu/configs/llama-3.1-8b.json \
      --decode 1x4096,8x16384 [--steps 16] [--device H200] [--out peer.jsonl]
"""
import argparse
import json
import sys
import time

import torch
import transformers


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--decode", required=True)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--device", default=torch.cuda.get_device_name())
    parser.add_argument("--commit", default="unknown")
    parser.add_argument("--out")
    args = parser.parse_args()

    spec = json.load(open(args.config))
    config = transformers.LlamaConfig(**spec)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()
    mode = f"transformers-{transformers.__version__}"
    command = " ".join(sys.argv)
    out = open(args.out, "a") if args.out else None
    for item in args.decode.split(","):
        batch, context = map(int, item.split("x"))
        record = {"bench": "peer", "device": args.device, "commit": args.commit,
                  "command": command, "mode": mode, "model": args.config.split("/")[-1],
                  "batch": batch, "context": context, "budget": None}
        try:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            ids = torch.randint(0, config.vocab_size, (batch, context), device="cuda")
            times = []
            with torch.no_grad():
                cache = transformers.DynamicCache(config=config)
                started = time.time()
                logits = model(ids, past_key_values=cache, use_cache=True).logits[:, -1]
                torch.cuda.synchronize()
                record["prefill_seconds"] = round(time.time() - started, 3)
                token = logits.argmax(-1, keepdim=True)
                for _ in range(args.steps):
                    begin = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                    begin.record()
                    logits = model(token, past_key_values=cache, use_cache=True).logits[:, -1]
                    token = logits.argmax(-1, keepdim=True)
                    end.record()
                    end.synchronize()
                    times.append(begin.elapsed_time(end))
            times = sorted(times[2:])
            p50 = times[len(times) // 2]
            record.update({"tpot_ms_p50": p50, "tpot_ms_p99": times[-1],
                           "decode_tok_s": batch / p50 * 1e3,
                           "peak_gpu_gib": torch.cuda.max_memory_allocated() / 2**30})
            del cache, logits
        except torch.OutOfMemoryError as error:
            record["error"] = f"out of memory: {str(error)[:160]}"
        line = json.dumps(record)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
