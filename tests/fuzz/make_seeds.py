#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora under tests/fuzz/corpus/<target>/: small inputs of
each kind the targets read, generated here (no model files). Rerun after changing it; the
corpora are committed. Needs the gguf package (scripts/setup installs it)."""
import json
import pathlib
import shutil
import struct
import tempfile

import gguf
import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
CORPUS = HERE / "corpus"


def put(target: str, name: str, data: bytes) -> None:
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)


def tiny_gguf() -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "tiny.gguf"
        writer = gguf.GGUFWriter(str(path), "llama")
        writer.add_block_count(1)
        writer.add_context_length(64)
        writer.add_embedding_length(8)
        writer.add_feed_forward_length(16)
        writer.add_head_count(2)
        writer.add_head_count_kv(1)
        writer.add_layer_norm_rms_eps(1e-5)
        writer.add_tokenizer_model("gpt2")
        tokens = ["a", "b", "c", "ab", "Ġ", "Ġa", "<|end|>", "!"]
        writer.add_token_list(tokens)
        writer.add_token_types([1, 1, 1, 1, 1, 1, 3, 1])
        writer.add_token_merges(["a b", "Ġ a"])
        writer.add_eos_token_id(6)
        writer.add_tensor("token_embd.weight", np.arange(64, dtype=np.float32).reshape(8, 8))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return path.read_bytes()


def safetensors_shard() -> bytes:
    header = json.dumps({"__metadata__": {"format": "pt"},
                         "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                         "v": {"dtype": "BF16", "shape": [1, 2], "data_offsets": [8, 12]}}).encode()
    return struct.pack("<Q", len(header)) + header + struct.pack("<2f", 1.0, 2.0) + b"\x80\x3f\x00\x40"


def tokenizer_json() -> bytes:
    vocab = {chr(c): i for i, c in enumerate(range(ord("a"), ord("z") + 1))}
    vocab.update({"Ġ": 26, "he": 27, "ll": 28, "hell": 29, "hello": 30, "Ġw": 31})
    return json.dumps({
        "added_tokens": [{"id": 32, "content": "<|end|>", "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}]},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": vocab,
                  "merges": ["h e", "l l", "he ll", "hell o", "Ġ w"]},
    }).encode()


def main() -> None:
    shutil.rmtree(CORPUS, ignore_errors=True)
    put("gguf_fuzz", "tiny-llama", tiny_gguf())
    put("safetensors_fuzz", "shard", b"\x00" + safetensors_shard())
    put("safetensors_fuzz", "index", b"\x01" + json.dumps(
        {"metadata": {"total_size": 12}, "weight_map": {"w": "a.safetensors",
                                                        "v": "b.safetensors"}}).encode())
    put("hf_config_fuzz", "tiny-llama.json", (REPO / "tests/data/tiny-llama.json").read_bytes())
    put("hf_config_fuzz", "rope-scaling.json", json.dumps({
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 100, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                            "original_max_position_embeddings": 8192}}).encode())
    put("tokenizer_json_fuzz", "tiny-bpe.json", tokenizer_json())
    for i, text in enumerate(["Hello, world!", "  two  spaces\nand\ttabs", "用中文回答：你好",
                              "emoji 🙂 and é", "<|im_start|>user\nhi<|im_end|>", "\xff\xfe"]):
        put("tokenize_fuzz", f"text-{i}", bytes([i % 8]) + text.encode("utf-8", "surrogateescape"))
    messages = b"\x00\x01\x01user says hi\x01\x02assistant says hello\x01\x01again"
    for template in sorted((REPO / "tests/unit/chat/templates").glob("*.jinja")):
        put("chat_template_fuzz", template.stem, template.read_bytes() + messages)
    # Engine parameters, then a few calls: submit, step, poll, cancel, step, stats, release.
    put("abi_fuzz", "submit-and-step", bytes([3, 2, 8, 4, 4, 0, 2, 4, 8, 16, 2, 1, 1, 0, 0, 0,
                                              0, 0, 6, 1, 2, 3, 4, 5, 6, 10, 2, 8, 1, 0, 0, 0, 1,
                                              1, 0, 1, 1, 0, 4, 8, 0, 3, 0, 2, 0, 7, 1, 0, 8]))
    put("abi_fuzz", "offloaded", bytes([2, 1, 8, 8, 4, 2, 30, 8, 16, 1, 2, 0, 0, 0, 0, 0, 0, 12,
                                        7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 20, 0, 6,
                                        1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]))


if __name__ == "__main__":
    main()
