"""Byte-level BPE against the PyPI `tokenizers` package built from SmolLM2's vocabulary and
merges: the GGUF itself ("smollm"), copies of its tokenizer metadata with the "gpt2",
"llama-bpe" and "qwen2" pre-tokenizers, and tokenizer.json directories saved by `tokenizers`
and loaded through FromHfDirectory. Ids must be identical on all of tiny-shakespeare (as one
text and line by line) and on the torture set; Decode(Encode(x)) == x.

Invalid UTF-8 (which `tokenizers` cannot take) follows this rule: each well-formed stretch is
encoded as `tokenizers` encodes it on its own, and each byte that starts no well-formed sequence
is the token of its byte-level symbol (a byte the vocabulary has no symbol for, 0xC0 0xC1
0xF5..0xFF in SmolLM2's, is dropped, as `tokenizers` drops it)."""
from __future__ import annotations

import json
import subprocess

import pytest

import tokenizer_fixtures as tf

PRE_TOKENIZERS = ["smollm", "gpt2", "llama-bpe", "qwen2"]
SOURCES = [f"gguf:{pre}" for pre in PRE_TOKENIZERS] + ["hf:smollm", "hf:llama-bpe"]
# All of tiny-shakespeare for these; hf:llama-bpe only on the torture set (time on 2 cores).
FULL_SOURCES = SOURCES[:-1]


@pytest.fixture(scope="module")
def vocab(smollm2_path):
    return tf.ByteLevelVocab(smollm2_path)


@pytest.fixture(scope="module")
def setups(vocab, smollm2_path, tmp_path_factory):
    """source name -> (pulse-tokenize arguments, reference tokenizer)."""
    out = {}
    root = tmp_path_factory.mktemp("byte_level")
    for source in SOURCES:
        kind, pre = source.split(":")
        reference = vocab.hf_tokenizer(pre)
        if kind == "gguf" and pre == "smollm":
            args = ["--gguf", str(smollm2_path)]
        elif kind == "gguf":
            path = root / f"{pre}.gguf"
            vocab.write_gguf(path, pre)
            args = ["--gguf", str(path)]
        else:
            directory = tf.save_hf_directory(reference, root / f"hf-{pre}", {
                "bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"},
                "add_bos_token": False, "chat_template": "{{ messages }}"})
            args = ["--hf-dir", str(directory)]
        out[source] = (args, reference)
    return out


def hf_ids(reference, texts: list[str]) -> list[list[int]]:
    return [e.ids for e in reference.encode_batch(texts, add_special_tokens=False)]


_REFERENCE_IDS: dict[tuple[str, str], list[list[int]]] = {}


def reference_ids(setups, source: str, what: str, texts: list[str]) -> list[list[int]]:
    """`tokenizers`' ids, computed once per pre-tokenizer (a GGUF and a tokenizer.json source of
    the same pre-tokenizer share the reference)."""
    key = (source.split(":")[1], what)
    if key not in _REFERENCE_IDS:
        _REFERENCE_IDS[key] = hf_ids(setups[source][1], texts)
    return _REFERENCE_IDS[key]


@pytest.mark.parametrize("source", FULL_SOURCES)
def test_whole_shakespeare_identical(setups, tool, shakespeare_path, source):
    args, _ = setups[source]
    text = shakespeare_path.read_text(encoding="utf-8")
    ours, decoded = tf.run_tokenize(tool("pulse-tokenize"), args, [text.encode()])
    theirs = reference_ids(setups, source, "whole", [text])[0]
    assert len(ours[0]) == len(theirs)
    assert ours[0] == theirs
    assert decoded[0] == text.encode()


@pytest.mark.parametrize("source", FULL_SOURCES)
def test_shakespeare_line_by_line_identical(setups, tool, shakespeare_path, source):
    args, _ = setups[source]
    lines = shakespeare_path.read_text(encoding="utf-8").split("\n")
    ours, decoded = tf.run_tokenize(tool("pulse-tokenize"), args, [l.encode() for l in lines])
    theirs = reference_ids(setups, source, "lines", lines)
    mismatches = [i for i in range(len(lines)) if ours[i] != theirs[i]]
    assert not mismatches, [lines[i] for i in mismatches[:5]]
    assert decoded == [l.encode() for l in lines]


@pytest.mark.parametrize("source", SOURCES)
def test_torture_set_identical(setups, tool, source):
    args, reference = setups[source]
    ours, decoded = tf.run_tokenize(tool("pulse-tokenize"), args, [t.encode() for t in tf.TORTURE])
    theirs = hf_ids(reference, tf.TORTURE)
    for text, mine, expected in zip(tf.TORTURE, ours, theirs):
        assert mine == expected, repr(text)
    # Control tokens decode to nothing by default, so compare with them rendered.
    rendered, rendered_decoded = tf.run_tokenize(
        tool("pulse-tokenize"), args, [t.encode() for t in tf.TORTURE], ["--render-special"])
    assert rendered == ours
    assert rendered_decoded == [t.encode() for t in tf.TORTURE]
    assert [reference.decode(ids, skip_special_tokens=False) for ids in ours] == tf.TORTURE


@pytest.mark.parametrize("source", ["gguf:smollm", "gguf:llama-bpe", "hf:smollm"])
def test_invalid_utf8_round_trips_and_valid_stretches_match(setups, vocab, tool, source):
    args, reference = setups[source]
    symbol_ids = {}
    byte_symbol = _byte_symbols()
    token_ids = {t: i for i, t in enumerate(vocab.tokens)}
    ours, decoded = tf.run_tokenize(tool("pulse-tokenize"), args, tf.INVALID_UTF8,
                                    ["--render-special"])
    for data, mine, back in zip(tf.INVALID_UTF8, ours, decoded):
        expected = []
        kept = b""
        for valid, part in tf.utf8_stretches(data):
            if valid:
                expected += reference.encode(part.decode(), add_special_tokens=False).ids
                kept += part
            elif byte_symbol[part[0]] in token_ids:
                expected.append(token_ids[byte_symbol[part[0]]])
                kept += part
        assert mine == expected, data
        assert back == kept, data
        symbol_ids[data] = kept
    # Only bytes without a symbol in this vocabulary were lost.
    assert symbol_ids[b"abc\x80def"] == b"abc\x80def"
    assert symbol_ids[b"\xfe\xfe high \xf5\x80\x80\x80"] == b" high \x80\x80\x80"


def _byte_symbols() -> list[str]:
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    symbols, extra = [], 256
    for b in range(256):
        if b in printable:
            symbols.append(chr(b))
        else:
            symbols.append(chr(extra))
            extra += 1
    return symbols


def test_the_pre_tokenizers_really_differ(setups, tool):
    # SmolLM2's vocabulary has no multi-digit tokens, so llama-bpe (digits in threes) and qwen2
    # (single digits) give the same ids here; their regexes are told apart in the gtests.
    texts = [b"x  \n  y \xc2\xbd"]
    results = {source: tf.run_tokenize(tool("pulse-tokenize"), setups[source][0], texts)[0]
               for source in ("gguf:smollm", "gguf:gpt2", "gguf:llama-bpe", "gguf:qwen2")}
    assert results["gguf:smollm"] != results["gguf:gpt2"]
    assert results["gguf:smollm"] != results["gguf:llama-bpe"]
    assert results["gguf:gpt2"] != results["gguf:llama-bpe"]
    assert results["gguf:llama-bpe"] == results["gguf:qwen2"]


def test_special_tokens_parse_only_when_asked(setups, tool):
    args, _ = setups["gguf:smollm"]
    text = b"<|im_start|>user\nhi<|im_end|>"
    parsed, _ = tf.run_tokenize(tool("pulse-tokenize"), args, [text])
    plain, decoded = tf.run_tokenize(tool("pulse-tokenize"), args, [text], ["--no-parse-special"])
    assert parsed[0][0] == 1 and parsed[0][-1] == 2
    assert 1 not in plain[0] and 2 not in plain[0]
    assert decoded == [text]


def test_properties_from_gguf_and_tokenizer_config(setups, tool):
    def info(source):
        args, _ = setups[source]
        out = subprocess.run([str(tool("pulse-tokenize")), *args, "--info"], check=True,
                             capture_output=True, text=True).stdout
        return json.loads(out)

    gguf_info = info("gguf:smollm")
    assert gguf_info["model"] == "gpt2" and gguf_info["pre_tokenizer"] == "smollm"
    assert gguf_info["vocab_size"] == 49152
    assert (gguf_info["bos_id"], gguf_info["eos_id"]) == (1, 2)
    assert gguf_info["end_of_generation_ids"] == [0]  # <|endoftext|> besides eos <|im_end|>
    assert gguf_info["add_bos"] is False and gguf_info["chat_template_bytes"] > 100
    hf_info = info("hf:smollm")
    assert {k: hf_info[k] for k in ("model", "pre_tokenizer", "vocab_size", "bos_id", "eos_id",
                                    "end_of_generation_ids", "add_bos")} == \
        {k: gguf_info[k] for k in ("model", "pre_tokenizer", "vocab_size", "bos_id", "eos_id",
                                   "end_of_generation_ids", "add_bos")}
    assert hf_info["chat_template_bytes"] == len("{{ messages }}")
    assert info("hf:llama-bpe")["pre_tokenizer"] == "llama-bpe"


def test_encoding_shakespeare_takes_well_under_a_second(tool, smollm2_path, shakespeare_path):
    result = subprocess.run([str(tool("pulse-tokenize")), "--gguf", str(smollm2_path),
                             "--text-file", str(shakespeare_path), "--ids-out", "/dev/null",
                             "--time"], check=True, capture_output=True, text=True)
    milliseconds = float(result.stderr.strip().split("=")[1])
    print(f"encoded {shakespeare_path.stat().st_size} bytes in {milliseconds:.1f} ms")
    assert milliseconds < 1000
