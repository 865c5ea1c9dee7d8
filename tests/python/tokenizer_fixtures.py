"""Helpers for the tokenizer comparisons: reading and writing tokenizer GGUF metadata, building
the matching Hugging Face `tokenizers` pipelines, running build/bin/pulse-tokenize, and the
shared torture texts."""
from __future__ import annotations

import json
import pathlib
import subprocess
import tempfile

import gguf
import tokenizers
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers

GPT2_REGEX = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPACE = "\u2581"

TORTURE = [
    "Hello, world! It's a test; we'll see what they've done. DON'T SHOUT, I'M HERE, YOU'VE SEEN.",
    "日本語のテキストと中文字符，한국어 텍스트도 있습니다。漢字かな交じり文",
    "العربية نص مع أرقام ١٢٣ و English في الوسط",
    "हिन्दी पाठ में संयुक्ताक्षर क्षत्रिय और अंक १२३४",
    "Русский текст, ελληνικά γράμματα ΑΒΓ, Ünïcödé façade naïve café",
    "emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵🇺🇸 ❤️ ✨ 🧑🏿‍💻",
    "combining: e\u0301 a\u0308 n\u0303 Z\u0351\u0352\u0353 \u0301start",
    "spaces:  two   three    four\ttab\t\ttabs\nnewline\n\n\nthree\r\nwindows\r\n\r\n \n trailing   ",
    "digits 0 12 345 6789 12345 123456 1234567 1234567890123 3.14159 1,000,000 x2y33z444 ٣٤٥ ½ ²",
    "special tokens in text: <|im_start|>user\nhi<|im_end|>\n<|endoftext|><repo_name>x<|im_start|",
    "unicode whitespace:\u00a0nbsp\u3000ideographic\u2028line\u2029para\u0085nel\u2009thin"
    "\u202fnarrow\u1680ogham\u000bvt\u000cff",
    "control \x00\x01\x02\x1b[31m\x7f chars and \u200b zero width \ufeff bom \u200d zwj",
    "mixed: abc123DEF   456   \n\t  ghi--->>> ``code`` {braces} [brackets] (parens) $$$ ###",
    "   leading spaces and trailing    ",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D I'd YOU'LL it's",
    "",
    " ",
    "  ",
    "\n",
    "\r\n",
    "\t",
    "a",
    "\u00a0",
    "🙂",
]

INVALID_UTF8 = [
    b"abc\x80def",
    b"\xc3(",
    b"caf\xc3",
    b"\xe2\x82 euro cut",
    b"\xf0\x9f\x98",
    b"ok \xed\xa0\x80 surrogate",
    b"overlong \xc0\xaf slash and \xe0\x80\xaf",
    b"\xfe\xfe high \xf5\x80\x80\x80",
    b"  \x80  \x81\n\x82 12\x8334 <|im_end|>\x84",
    b"\x80",
]


def gguf_strings(reader: gguf.GGUFReader, key: str) -> list[str]:
    field = reader.fields[key]
    return [bytes(field.parts[i]).decode("utf-8") for i in field.data]


def gguf_ints(reader: gguf.GGUFReader, key: str) -> list[int]:
    field = reader.fields[key]
    return [int(field.parts[i][0]) for i in field.data]


def gguf_scalar(reader: gguf.GGUFReader, key: str):
    field = reader.fields.get(key)
    return None if field is None else field.parts[field.data[0]][0]


class ByteLevelVocab:
    """The byte-level vocabulary of a GGUF file (tokens, token types, merges, special ids)."""

    def __init__(self, path: pathlib.Path):
        reader = gguf.GGUFReader(str(path))
        self.tokens = gguf_strings(reader, "tokenizer.ggml.tokens")
        self.types = gguf_ints(reader, "tokenizer.ggml.token_type")
        self.merges = gguf_strings(reader, "tokenizer.ggml.merges")
        self.bos = int(gguf_scalar(reader, "tokenizer.ggml.bos_token_id"))
        self.eos = int(gguf_scalar(reader, "tokenizer.ggml.eos_token_id"))

    def control_tokens(self) -> list[str]:
        return [t for t, kind in zip(self.tokens, self.types) if kind == 3]

    def write_gguf(self, path: pathlib.Path, pre: str) -> None:
        """The same vocabulary with another tokenizer.ggml.pre (tokenizer metadata only)."""
        writer = gguf.GGUFWriter(str(path), "llama")
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(pre)
        writer.add_token_list(self.tokens)
        writer.add_token_types(self.types)
        writer.add_token_merges(self.merges)
        writer.add_bos_token_id(self.bos)
        writer.add_eos_token_id(self.eos)
        writer.add_add_bos_token(False)
        write_and_close(writer)

    def hf_tokenizer(self, pre: str) -> tokenizers.Tokenizer:
        """The `tokenizers` pipeline that llama.cpp's pre-tokenizer `pre` stands for."""
        vocab = {token: i for i, token in enumerate(self.tokens)}
        merges = [tuple(m.split(" ")) for m in self.merges]
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        no_regex = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        ignore_merges = pre in ("llama-bpe", "llama3")
        tok = tokenizers.Tokenizer(models.BPE(vocab, merges, ignore_merges=ignore_merges))
        if pre == "smollm":
            tok.pre_tokenizer = pre_tokenizers.Sequence(
                [pre_tokenizers.Digits(individual_digits=True), byte_level])
        elif pre == "gpt2":
            tok.pre_tokenizer = byte_level
        elif pre in ("llama-bpe", "qwen2"):
            regex = LLAMA3_REGEX if pre == "llama-bpe" else QWEN2_REGEX
            tok.pre_tokenizer = pre_tokenizers.Sequence(
                [pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False), no_regex])
        else:
            raise ValueError(pre)
        tok.decoder = decoders.ByteLevel()
        tok.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False)
                                for t in self.control_tokens()])
        return tok


def write_and_close(writer: gguf.GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def save_hf_directory(tok: tokenizers.Tokenizer, directory: pathlib.Path,
                      config: dict | None = None) -> pathlib.Path:
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    if config is not None:
        (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def run_tokenize(tool: pathlib.Path, source: list[str], texts: list[bytes],
                 extra: list[str] | None = None) -> tuple[list[list[int]], list[bytes]]:
    """Our ids and Decode(ids) of each text, through pulse-tokenize --hex-lines."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = pathlib.Path(tmp)
        (tmp_path / "in.hex").write_text("".join(t.hex() + "\n" for t in texts))
        subprocess.run([str(tool), *source, "--hex-lines", str(tmp_path / "in.hex"),
                        "--ids-out", str(tmp_path / "ids"), "--decoded-out",
                        str(tmp_path / "decoded"), "--no-add-special", *(extra or [])],
                       check=True)
        ids = [[int(x) for x in line.split()]
               for line in (tmp_path / "ids").read_text().split("\n")[:-1]]
        decoded = [bytes.fromhex(line)
                   for line in (tmp_path / "decoded").read_text().split("\n")[:-1]]
    assert len(ids) == len(texts) and len(decoded) == len(texts)
    return ids, decoded


def utf8_stretches(data: bytes) -> list[tuple[bool, bytes]]:
    """(valid, bytes) parts: maximal well-formed stretches and each byte that starts no
    well-formed sequence, as the library splits invalid UTF-8."""
    parts: list[tuple[bool, bytes]] = []
    valid = bytearray()
    i = 0
    while i < len(data):
        for length in (1, 2, 3, 4):
            try:
                data[i:i + length].decode("utf-8")
                break
            except UnicodeDecodeError:
                continue
        else:
            length = 0
        if length:
            valid += data[i:i + length]
            i += length
            continue
        if valid:
            parts.append((True, bytes(valid)))
            valid = bytearray()
        parts.append((False, data[i:i + 1]))
        i += 1
    if valid:
        parts.append((True, bytes(valid)))
    return parts
