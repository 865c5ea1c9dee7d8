"""SentencePiece-style BPE ("llama": U+2581 for spaces, merges by score, byte fallback) against
the PyPI `tokenizers` package. A small vocabulary is trained with byte fallback on part of
tiny-shakespeare; its scores follow the merge order, and the merge list given to `tokenizers` is
derived from the vocabulary and scores (every pair whose concatenation is a token, by that
token's score), as Hugging Face's conversion of SentencePiece models does. It is written as a
GGUF (model llama: scores, token types with byte tokens) and as a Llama-2-style tokenizer.json
(Prepend + Replace normalizer, byte fallback), and ids must be identical to `tokenizers` on all
of tiny-shakespeare, line by line, and on the torture set (emoji and rare scripts go through
byte fallback). Metaspace-style tokenizer.json variants are checked on the torture set.

Invalid UTF-8: the text is normalized as usual (the U+2581 prefix, spaces replaced); each
well-formed stretch of that is merged as `tokenizers`' BPE model merges it on its own, and each
byte that starts no well-formed sequence is its <0xAB> token."""
from __future__ import annotations

import json
import subprocess

import gguf
import pytest
import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

import tokenizer_fixtures as tf

SPECIALS = ["<unk>", "<s>", "</s>"]
BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]


class SentencePieceVocab:
    def __init__(self, training_lines: list[str], size: int):
        trainer_tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
        trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(
            replacement=tf.SPACE, prepend_scheme="always", split=True)
        trainer_tok.train_from_iterator(
            training_lines, trainers.BpeTrainer(vocab_size=size, show_progress=False))
        trained = trainer_tok.get_vocab()
        pieces = [t for t in sorted(trained, key=trained.get) if t not in SPECIALS]
        self.tokens = SPECIALS + BYTE_TOKENS + pieces
        # Earlier merges score higher; single characters are never merge results.
        self.scores = [0.0] * (len(SPECIALS) + 256) + [-float(i) for i in range(len(pieces))]
        self.types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)
        ids = {t: i for i, t in enumerate(self.tokens)}
        merges = []
        for t in pieces:
            for k in range(1, len(t)):
                if t[:k] in ids and t[k:] in ids:
                    merges.append((ids[t], k, (t[:k], t[k:])))
        self.merges = [pair for _, _, pair in sorted(merges)]
        self.ids = ids

    def hf_tokenizer(self, style: str) -> tokenizers.Tokenizer:
        tok = tokenizers.Tokenizer(models.BPE(self.ids, self.merges, unk_token="<unk>",
                                              byte_fallback=True, fuse_unk=True))
        if style == "prepend":
            tok.normalizer = normalizers.Sequence(
                [normalizers.Prepend(tf.SPACE), normalizers.Replace(" ", tf.SPACE)])
        else:  # "metaspace-first" / "metaspace-always"
            tok.pre_tokenizer = pre_tokenizers.Metaspace(
                replacement=tf.SPACE, prepend_scheme=style.split("-")[1], split=False)
        tok.decoder = decoders.Sequence([decoders.Replace(tf.SPACE, " "), decoders.ByteFallback(),
                                         decoders.Fuse(), decoders.Strip(" ", 1, 0)])
        tok.add_special_tokens(SPECIALS)
        return tok

    def write_gguf(self, path) -> None:
        writer = gguf.GGUFWriter(str(path), "llama")
        writer.add_tokenizer_model("llama")
        writer.add_token_list(self.tokens)
        writer.add_token_scores(self.scores)
        writer.add_token_types(self.types)
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
        writer.add_unk_token_id(0)
        writer.add_add_bos_token(True)
        writer.add_add_space_prefix(True)
        tf.write_and_close(writer)


@pytest.fixture(scope="module")
def vocab(shakespeare_path):
    lines = shakespeare_path.read_text(encoding="utf-8").split("\n")
    return SentencePieceVocab(lines[:6000], 800)


@pytest.fixture(scope="module")
def setups(vocab, tmp_path_factory):
    root = tmp_path_factory.mktemp("spm")
    vocab.write_gguf(root / "spm.gguf")
    config = {"bos_token": "<s>", "eos_token": {"content": "</s>"}, "add_bos_token": True}
    out = {"gguf": (["--gguf", str(root / "spm.gguf")], vocab.hf_tokenizer("prepend"))}
    for style in ("prepend", "metaspace-first", "metaspace-always"):
        reference = vocab.hf_tokenizer(style)
        directory = tf.save_hf_directory(reference, root / style, config)
        out[f"hf:{style}"] = (["--hf-dir", str(directory)], reference)
    return out


FULL_SOURCES = ["gguf", "hf:prepend"]
ALL_SOURCES = FULL_SOURCES + ["hf:metaspace-first", "hf:metaspace-always"]


@pytest.mark.parametrize("source", FULL_SOURCES)
def test_whole_shakespeare_identical(setups, tool, shakespeare_path, source):
    args, reference = setups[source]
    text = shakespeare_path.read_text(encoding="utf-8")
    ours, decoded = tf.run_tokenize(tool("pulse-tokenize"), args, [text.encode()])
    theirs = reference.encode(text, add_special_tokens=False).ids
    assert len(ours[0]) == len(theirs)
    assert ours[0] == theirs
    assert decoded[0] == text.encode()


@pytest.mark.parametrize("source", FULL_SOURCES)
def test_shakespeare_line_by_line_identical(setups, tool, shakespeare_path, source):
    args, reference = setups[source]
    lines = shakespeare_path.read_text(encoding="utf-8").split("\n")
    ours, decoded = tf.run_tokenize(tool("pulse-tokenize"), args, [l.encode() for l in lines])
    theirs = [e.ids for e in reference.encode_batch(lines, add_special_tokens=False)]
    mismatches = [i for i in range(len(lines)) if ours[i] != theirs[i]]
    assert not mismatches, [lines[i] for i in mismatches[:5]]
    assert decoded == [l.encode() for l in lines]


@pytest.mark.parametrize("source", ALL_SOURCES)
def test_torture_set_identical(setups, vocab, tool, source):
    args, reference = setups[source]
    texts = tf.TORTURE + ["<s>hello</s> <s> world", "x<unk>y", " <s>"]
    ours, decoded = tf.run_tokenize(tool("pulse-tokenize"), args, [t.encode() for t in texts],
                                    ["--render-special"])
    theirs = [e.ids for e in reference.encode_batch(texts, add_special_tokens=False)]
    for text, mine, expected in zip(texts, ours, theirs):
        assert mine == expected, repr(text)
    byte_ids = set(range(3, 259))
    assert any(byte_ids & set(ids) for ids in ours), "emoji should go through byte fallback"
    for text, ids, back in zip(texts, ours, decoded):
        assert back.decode() == reference.decode(ids, skip_special_tokens=False), repr(text)
        # Metaspace adds no U+2581 before a leading space, yet decoding drops one (as
        # `tokenizers` does): only such texts, and texts with special tokens, do not round-trip.
        loses_space = source.startswith("hf:metaspace") and text.startswith(" ")
        if not loses_space and not any(s in text for s in SPECIALS):
            assert back == text.encode(), repr(text)


@pytest.mark.parametrize("source", FULL_SOURCES)
def test_invalid_utf8_round_trips_and_valid_stretches_match(setups, vocab, tool, source):
    args, reference = setups[source]
    ours, decoded = tf.run_tokenize(tool("pulse-tokenize"), args, tf.INVALID_UTF8)
    for data, mine, back in zip(tf.INVALID_UTF8, ours, decoded):
        normalized = tf.SPACE.encode() + data.replace(b" ", tf.SPACE.encode())
        expected = []
        for valid, part in tf.utf8_stretches(normalized):
            if valid:
                expected += [t.id for t in reference.model.tokenize(part.decode())]
            else:
                expected.append(vocab.ids[f"<0x{part[0]:02X}>"])
        assert mine == expected, data
        assert back == data


def test_properties(setups, tool):
    for source in ("gguf", "hf:prepend"):
        out = subprocess.run([str(tool("pulse-tokenize")), *setups[source][0], "--info"],
                             check=True, capture_output=True, text=True).stdout
        info = json.loads(out)
        assert info["model"] == "llama" and info["pre_tokenizer"] == ""
        assert (info["bos_id"], info["eos_id"], info["add_bos"]) == (1, 2, True)
        assert info["add_space_prefix"] is True


def test_bos_is_added_with_add_special(setups, tool, tmp_path):
    (tmp_path / "in.hex").write_text(b"hello there".hex() + "\n")
    for source in ("gguf", "hf:prepend"):
        out = subprocess.run([str(tool("pulse-tokenize")), *setups[source][0], "--hex-lines",
                              str(tmp_path / "in.hex")], check=True, capture_output=True,
                             text=True).stdout
        ids = [int(x) for x in out.split()]
        reference = setups[source][1]
        assert ids == [1] + reference.encode("hello there", add_special_tokens=False).ids
