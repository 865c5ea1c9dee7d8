"""SmolLM2's tokenizer (read from the GGUF by the library) against the PyPI tokenizers package
built from the same vocabulary and merges: identical ids on all of tiny-shakespeare and on a
torture set; decode(encode(x)) == x, also for invalid UTF-8 (of bytes the vocabulary has); and
encode speed."""
from __future__ import annotations

import time

import gguf
import pytest
import tokenizers
from tokenizers import decoders, models, pre_tokenizers

import pulse_text

TORTURE = [
    "Hello, world! It's a test; we'll see what they've done. DON'T SHOUT, I'M HERE.",
    "日本語のテキストと中文字符，한국어 텍스트도 있습니다。",
    "العربية نص مع أرقام ١٢٣ و English",
    "हिन्दी पाठ में संयुक्ताक्षर क्षत्रिय",
    "Русский текст, ελληνικά γράμματα, Ünïcödé façade naïve café",
    "emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ ✨",
    "combining: e\u0301 a\u0308 n\u0303 Z\u0351\u0352\u0353",
    "spaces:  two   three    four\ttab\t\ttabs\nnewline\n\n\nthree\r\nwindows \n trailing   ",
    "digits 0 12 345 6789 1234567890 3.14159 1,000,000 x2y33z444",
    "special tokens in text: <|im_start|>user\nhi<|im_end|>\n<|endoftext|><repo_name>x",
    "unicode whitespace:\u00a0nbsp\u3000ideographic\u2028line\u0085nel\u2009thin",
    "control \x01\x02\x7f chars and \u200b zero width \ufeff bom",
    "mixed: abc123DEF   456   \n\t  ghi--->>> ``code`` {braces} [brackets] (parens)",
    "   leading spaces and trailing    ",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'Ve",
    "",
    " ",
    "\n",
    "a",
]
INVALID_UTF8 = [b"abc\x80def", b"\xc3(", b"caf\xc3", b"\xe2\x82 euro cut", b"\xf0\x9f\x98",
                b"ok \xed\xa0\x80 surrogate"]


@pytest.fixture(scope="module")
def library(build_dir, smollm2_path):
    lib = pulse_text.TextLibrary(build_dir / "lib" / "libpulseinfer.so", smollm2_path)
    yield lib
    lib.close()


@pytest.fixture(scope="module")
def reference(smollm2_path) -> tokenizers.Tokenizer:
    reader = gguf.GGUFReader(str(smollm2_path))

    def strings(key):
        field = reader.fields[key]
        return [bytes(field.parts[i]).decode() for i in field.data]

    tokens = strings("tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ")) for m in strings("tokenizer.ggml.merges")]
    types_field = reader.fields["tokenizer.ggml.token_type"]
    types = [int(types_field.parts[i][0]) for i in types_field.data]
    vocab = {token: i for i, token in enumerate(tokens)}
    tok = tokenizers.Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False)
                            for t, kind in zip(tokens, types) if kind == 3])
    return tok


def test_identical_ids_on_all_of_tiny_shakespeare(library, reference, shakespeare_path):
    text = shakespeare_path.read_text(encoding="utf-8")
    ours = library.tokenize(text.encode())
    theirs = reference.encode(text).ids
    assert len(ours) == len(theirs)
    assert ours == theirs


def test_identical_ids_line_by_line(library, reference, shakespeare_path):
    lines = shakespeare_path.read_text(encoding="utf-8").splitlines(keepends=True)[:4000]
    for line in lines:
        assert library.tokenize(line.encode()) == reference.encode(line).ids, repr(line)


@pytest.mark.parametrize("text", TORTURE)
def test_identical_ids_on_the_torture_set(library, reference, text):
    assert library.tokenize(text.encode()) == reference.encode(text).ids


@pytest.mark.parametrize("text", TORTURE)
def test_decode_of_encode_is_the_text(library, reference, text):
    ids = library.tokenize(text.encode())
    assert library.detokenize(ids, flags=1) == text.encode()
    assert reference.decode(ids, skip_special_tokens=False) == text


def test_special_tokens_are_plain_text_unless_parsed(library):
    text = b"<|im_start|>user"
    assert library.tokenize(text)[0] == 1
    plain = library.tokenize(text, flags=0)
    assert 1 not in plain and library.detokenize(plain) == text


@pytest.mark.parametrize("data", INVALID_UTF8)
def test_invalid_utf8_round_trips(library, data):
    ids = library.tokenize(data)
    assert library.detokenize(ids) == data


def test_valid_text_around_an_invalid_byte_tokenizes_as_tokenizers_does(library, reference):
    # Invalid bytes never match the pre-tokenizer's expressions, so they stand alone between
    # the pieces of the valid text on either side.
    before, after = "The capital", " of France"
    ids = library.tokenize(before.encode() + b"\x80" + after.encode())
    expected_before = reference.encode(before).ids
    expected_after = reference.encode(after).ids
    assert ids[:len(expected_before)] == expected_before
    assert ids[len(ids) - len(expected_after):] == expected_after
    assert library.detokenize(ids[len(expected_before):len(ids) - len(expected_after)]) == b"\x80"


def test_bytes_the_vocabulary_lacks_are_dropped_as_tokenizers_drops_them(library, reference):
    # SmolLM2's vocabulary has no symbol for 0xFF or 0xC0 (never part of UTF-8), nor does
    # tokenizers produce one: such bytes cannot survive encoding.
    assert library.tokenize(b"\xff") == []
    assert library.detokenize(library.tokenize(b"\xc0\xaf overlong")) == b"\xaf overlong"
    assert library.tokenize(b"a\xffb") == library.tokenize(b"a") + library.tokenize(b"b")


def test_encoding_a_megabyte_is_fast(library, shakespeare_path):
    data = shakespeare_path.read_bytes()
    start = time.perf_counter()
    library.tokenize(data)
    seconds = time.perf_counter() - start
    print(f"encoded {len(data)} bytes in {seconds:.3f} s")
    assert seconds < 1.0
