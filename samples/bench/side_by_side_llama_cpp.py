#!/usr/bin/env python3
"""This library and llama.cpp on the same GGUF file, on the CPU, in one run.

    python3 samples/bench/side_by_side_llama_cpp.py --model .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf \
        [--threads 2] [--runs 5] [--prompt 512] [--batch 8] [--weight-types quantized,f32]
        [--out side_by_side.jsonl]
        [--venv .cache/llama-cpp-venv] [--commit SHA] [--accuracy]

llama.cpp comes from PyPI's llama-cpp-python, installed by this script into its own virtual
environment (--venv; pip builds it for this machine's instruction sets, ggml_cpu_options); it is
never a dependency of the library. Each run measures, each in a fresh process, this library
(build/bin/pulseinfer-bench, once per --weight-types) and llama.cpp, alternating A B A B: the
time to the first token of a random prompt of --prompt tokens (512; prefill tokens/s), the median
time of 64 greedy decode steps of one request after it (batch-1 decode tokens/s) and of --batch
requests of such prompts together (8; tokens a step as many), and the process's peak resident memory. The table
printed last has the medians over the runs; every run is a JSON line in --out.

--accuracy instead compares the last position's logits of the three texts of
tests/python/test_forward_numpy.py (tokenized by llama.cpp) with the float64 NumPy forward pass
of tests/python/numpy_llama.py on the file's dequantized weights: the relative L2 error, and
whether the top token is the reference's, of this library per --weight-types and of llama.cpp.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DECODE = 64

# llama.cpp: one sequence through llama-cpp-python's Llama (its prompt's prefill, then its
# decode steps: the faster of the two ways measured here), then --batch sequences through its
# bindings of the C API (Llama serves one sequence) in one KV cache, prefilled one after another
# and decoded together; greedy.
LLAMA_RUN = r"""
import json, random, statistics, sys, time
import numpy as np
import llama_cpp
path, threads, batch_size, prompt_len, decode = sys.argv[1], *map(int, sys.argv[2:6])
llama_cpp.llama_backend_init()
model = llama_cpp.llama_model_load_from_file(path.encode(), llama_cpp.llama_model_default_params())
n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
rng = random.Random(7)


def run(sequences):
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = sequences * (prompt_len + decode + 8)
    params.n_batch = params.n_ubatch = prompt_len
    params.n_seq_max = sequences
    params.kv_unified = True
    params.n_threads = params.n_threads_batch = threads
    ctx = llama_cpp.llama_init_from_model(model, params)
    batch = llama_cpp.llama_batch_init(prompt_len, 0, sequences)

    def submit(entries):  # (token, position, sequence, wants logits)
        batch.n_tokens = len(entries)
        for i, (token, pos, seq, logits) in enumerate(entries):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq, int(logits)
        if llama_cpp.llama_decode(ctx, batch) != 0:
            sys.exit("llama_decode failed")

    def argmax(i):
        row = llama_cpp.llama_get_logits_ith(ctx, i)
        return int(np.argmax(np.ctypeslib.as_array(row, shape=(n_vocab,))))

    tokens = []
    for seq in range(sequences):
        prompt = [rng.randrange(n_vocab) for _ in range(prompt_len)]
        submit([(t, p, seq, p == prompt_len - 1) for p, t in enumerate(prompt)])
        tokens.append(argmax(prompt_len - 1))
    times = []
    for step in range(decode):
        start = time.perf_counter()
        submit([(tokens[s], prompt_len + step, s, True) for s in range(sequences)])
        tokens = [argmax(s) for s in range(sequences)]
        times.append(time.perf_counter() - start)
    llama_cpp.llama_batch_free(batch)
    llama_cpp.llama_free(ctx)
    return 1e3 * statistics.median(times)


llm = llama_cpp.Llama(model_path=path, n_threads=threads, n_threads_batch=threads,
                      n_ctx=prompt_len + decode + 8, n_batch=prompt_len, verbose=False)
prompt = [rng.randrange(n_vocab) for _ in range(prompt_len)]
start = time.perf_counter()
llm.eval(prompt)
token = int(llm.sample(temp=0.0))
prefill_s = time.perf_counter() - start
times = []
for _ in range(decode):
    start = time.perf_counter()
    llm.eval([token])
    token = int(llm.sample(temp=0.0))
    times.append(time.perf_counter() - start)
decode_ms = 1e3 * statistics.median(times)
del llm
batch_ms = run(batch_size)
print(json.dumps({"prefill_s": prefill_s, "decode_ms_p50": decode_ms,
                  "decode_batch_ms_p50": batch_ms, "version": llama_cpp.__version__}))
"""

LLAMA_LOGITS = r"""
import json, sys
import llama_cpp
llm = llama_cpp.Llama(model_path=sys.argv[1], n_threads=int(sys.argv[2]), n_ctx=512,
                      n_batch=512, logits_all=True, verbose=False)
out = []
for text in json.loads(sys.argv[3]):
    ids = llm.tokenize(text.encode(), add_bos=False, special=False)
    llm.reset()
    llm.eval(ids)
    out.append({"ids": ids, "logits": [float(v) for v in llm.scores[len(ids) - 1]]})
print(json.dumps(out))
"""


def accuracy(args, python):
    sys.path.insert(0, os.path.join(REPO, "tests", "python"))
    import numpy as np
    import numpy_llama
    from ref_dump_logits import dump_logits, relative_error
    from test_forward_numpy import TEXTS

    stdout, _ = measure([python, "-c", LLAMA_LOGITS, args.model, str(args.threads),
                         json.dumps(TEXTS)])
    reference = numpy_llama.Model(numpy_llama.load_gguf(args.model))
    tool = os.path.join(REPO, "build", "bin", "pulse-dump-logits")
    with open(args.out, "w") as out, tempfile.TemporaryDirectory() as folder:
        for index, entry in enumerate(json.loads(stdout.strip().splitlines()[-1])):
            expected = reference.forward(entry["ids"])[-1]
            engines = {"llama.cpp": np.asarray(entry["logits"])}
            for weight_type in args.weight_types.split(","):
                result = dump_logits(tool, args.model, entry["ids"], folder,
                                     weight_type=weight_type, greedy=0)
                engines[f"pulseinfer {weight_type}"] = result.logits
            for engine, logits in engines.items():
                record = {"bench": "side-by-side-accuracy", "engine": engine, "text": index,
                          "tokens": len(entry["ids"]),
                          "relative_error": relative_error(logits, expected),
                          "top_token_kept": bool(np.argmax(logits) == np.argmax(expected)),
                          "model": os.path.basename(args.model), "commit": args.commit,
                          "command": " ".join(sys.argv)}
                out.write(json.dumps(record) + "\n")
                print(f"text {index} ({len(entry['ids'])} tokens): {engine:24} relative error "
                      f"{record['relative_error']:.2e}, top token "
                      f"{'kept' if record['top_token_kept'] else 'changed'}")


def ensure_llama_cpp(venv):
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    check = subprocess.run([python, "-c", "import llama_cpp"], capture_output=True)
    if check.returncode != 0:
        env = dict(os.environ, CMAKE_ARGS=" ".join(ggml_cpu_options()))
        subprocess.run([python, "-m", "pip", "install", "--quiet", "llama-cpp-python"], check=True,
                       env=env)
    return python


def ggml_cpu_options():
    """ggml's instruction sets for this CPU, as -march=native would pick them, but without AMX:
    a native build's AMX kernels crashed in llama_decode where the kernel grants no AMX tiles."""
    flags = set()
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    options = ["-DGGML_NATIVE=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF",
               "-DGGML_AMX_BF16=OFF"]
    for flag, option in [("avx", "AVX"), ("avx2", "AVX2"), ("fma", "FMA"), ("f16c", "F16C"),
                         ("avx_vnni", "AVX_VNNI"), ("avx512f", "AVX512"),
                         ("avx512_vnni", "AVX512_VNNI"), ("avx512vbmi", "AVX512_VBMI"),
                         ("avx512_bf16", "AVX512_BF16")]:
        options.append(f"-DGGML_{option}={'ON' if flag in flags else 'OFF'}")
    return options


def measure(command):
    """Runs command; returns its stdout and the process's peak resident memory in MiB."""
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(command, stdout=stdout, stderr=stderr, text=True)
        _, status, usage = os.wait4(process.pid, 0)
        exit_code = os.waitstatus_to_exitcode(status)
        stdout.seek(0)
        stderr.seek(0)
        if exit_code != 0:
            sys.exit(f"{command[0]} failed ({exit_code}): {stderr.read()[-2000:]}")
        return stdout.read(), usage.ru_maxrss / 1024.0


def run_pulse(model, weight_type, prompt, batch):
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "pulse.jsonl")
        command = [os.path.join(REPO, "build", "bin", "pulseinfer-bench"), "--model", model,
                   "--backend", "cpu", "--weight-type", weight_type, "--modes", "dense",
                   "--decode", f"1x{prompt},{batch}x{prompt}", "--decode-steps", str(DECODE + 2),
                   "--prefill", str(prompt), "--out", out]
        _, peak_mib = measure(command)
        records = [json.loads(line) for line in open(out)]
    decode = {r["batch"]: r for r in records if r["bench"] == "decode"}
    prefill = next(r for r in records if r["bench"] == "prefill")
    return {"engine": f"pulseinfer {weight_type}", "prefill_s": prefill["seconds"],
            "decode_ms_p50": decode[1]["tpot_ms_p50"],
            "decode_batch_ms_p50": decode[batch]["tpot_ms_p50"], "peak_mib": peak_mib}


def run_llama(python, model, threads, prompt, batch):
    stdout, peak_mib = measure([python, "-c", LLAMA_RUN, model, str(threads), str(batch),
                                str(prompt), str(DECODE)])
    result = json.loads(stdout.strip().splitlines()[-1])
    return {"engine": f"llama.cpp {result['version']}", "prefill_s": result["prefill_s"],
            "decode_ms_p50": result["decode_ms_p50"],
            "decode_batch_ms_p50": result["decode_batch_ms_p50"], "peak_mib": peak_mib}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    # pulseinfer-bench runs on every core (pulse_model_params.threads 0): llama.cpp gets as many.
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--prompt", type=int, default=512, help="tokens of each random prompt")
    parser.add_argument("--batch", type=int, default=8, help="requests decoding together")
    parser.add_argument("--weight-types", default="quantized,f32")
    parser.add_argument("--out", default="side_by_side.jsonl")
    parser.add_argument("--commit", default="unknown")
    parser.add_argument("--venv", default=os.path.join(REPO, ".cache", "llama-cpp-venv"),
                        help="llama-cpp-python's virtual environment, made when absent")
    parser.add_argument("--accuracy", action="store_true",
                        help="compare logits with the float64 reference instead of timing")
    args = parser.parse_args()
    python = ensure_llama_cpp(args.venv)
    if args.accuracy:
        accuracy(args, python)
        return
    results = {}
    with open(args.out, "w") as out:
        for run in range(args.runs):
            measured = [run_pulse(args.model, w, args.prompt, args.batch)
                        for w in args.weight_types.split(",")]
            measured.append(run_llama(python, args.model, args.threads, args.prompt, args.batch))
            for record in measured:
                record.update({"bench": "side-by-side", "run": run, "threads": args.threads,
                               "model": os.path.basename(args.model), "commit": args.commit,
                               "prompt": args.prompt, "decode_steps": DECODE,
                               "batch": args.batch,
                               "command": " ".join(sys.argv)})
                out.write(json.dumps(record) + "\n")
                out.flush()
                results.setdefault(record["engine"], []).append(record)
                print(f"run {run}: {record['engine']:28} prefill "
                      f"{args.prompt / record['prefill_s']:7.1f} tok/s  decode "
                      f"{1e3 / record['decode_ms_p50']:6.1f} tok/s, batch {args.batch} "
                      f"{args.batch * 1e3 / record['decode_batch_ms_p50']:6.1f} tok/s  "
                      f"peak {record['peak_mib']:6.0f} MiB", flush=True)
    print(f"\nmedians of {args.runs} runs, {args.threads} threads, {os.path.basename(args.model)}")
    print(f"{'engine':28} {'prefill tok/s':>14} {'decode tok/s':>13} "
          f"{f'batch {args.batch} tok/s':>14} {'peak MiB':>9}")
    for engine, records in results.items():
        prefill = statistics.median(args.prompt / r["prefill_s"] for r in records)
        decode = statistics.median(1e3 / r["decode_ms_p50"] for r in records)
        batched = statistics.median(args.batch * 1e3 / r["decode_batch_ms_p50"] for r in records)
        peak = statistics.median(r["peak_mib"] for r in records)
        print(f"{engine:28} {prefill:14.1f} {decode:13.1f} {batched:14.1f} {peak:9.0f}")


if __name__ == "__main__":
    main()
