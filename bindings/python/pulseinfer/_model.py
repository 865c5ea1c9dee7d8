"""A loaded model: its description and its text functions."""
from __future__ import annotations

import dataclasses
import os
import weakref
from functools import partial
from typing import Iterable, Mapping, Sequence

from . import capi
from ._buffers import decode, read_text, read_tokens
from ._enums import DetokenizeFlags, TokenizeFlags
from ._handle import Handle
from ._params import ModelParams
from ._structs import from_struct


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """pulse_model_info. tokenizer is "" for a model without one (random weights), and
    chat_template "" when the model has no template this library renders."""

    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    context_length: int
    tie_word_embeddings: bool
    parameter_count: int
    architecture: str
    format: str
    stored_type: str
    weight_type: str
    backend: str
    bos_token: int
    eos_token: int
    tokenizer: str
    chat_template: str
    tensor_parallel_size: int


class Model:
    """A model loaded from a GGUF file, a Hugging Face directory, or random weights
    (pulse_model_load). Immutable and safe to share between threads; engines made from it keep
    it alive, so it may be closed while they run. Loading releases the GIL."""

    def __init__(self, path: str | os.PathLike[str], params: ModelParams | None = None) -> None:
        _, pointer = capi.pulse_model_load(os.fspath(path), (params or ModelParams())._struct())
        self._handle = Handle(pointer, capi.pulse_model_free, "model")
        self._finalizer = weakref.finalize(self, self._handle.close)
        info = capi.pulse_model_info()
        capi.pulse_model_info_get(pointer, info)
        self.info = from_struct(ModelInfo, info,
                                tie_word_embeddings=bool(info.tie_word_embeddings))

    def tokenize(self, text: str | bytes,
                 flags: TokenizeFlags = TokenizeFlags.DEFAULT) -> list[int]:
        """The token ids of `text` (str is encoded as UTF-8; bytes may be any bytes)."""
        with self._handle.use() as model:
            return read_tokens(partial(capi.pulse_tokenize, model, text, flags))

    def detokenize(self, tokens: Sequence[int],
                   flags: DetokenizeFlags = DetokenizeFlags(0)) -> str:
        """The text of `tokens`; control tokens decode to nothing unless RENDER_SPECIAL."""
        with self._handle.use() as model:
            return decode(read_text(partial(capi.pulse_detokenize, model, tokens, flags)))

    def apply_chat_template(self, messages: Iterable[Mapping[str, str]],
                            add_generation_prompt: bool = True) -> str:
        """The conversation formatted by the model's chat template, as a prompt for
        Engine.generate(..., tokenize_flags=TokenizeFlags.PARSE_SPECIAL). Each message is a
        mapping with "role" ("system", "user" or "assistant") and "content"."""
        pairs = [(message["role"], message["content"]) for message in messages]
        with self._handle.use() as model:
            return decode(read_text(partial(capi.pulse_chat_apply_template, model, pairs,
                                            int(add_generation_prompt))))

    @property
    def closed(self) -> bool:
        return self._handle.closed

    def close(self) -> None:
        """Releases this handle's reference to the model (the engines keep theirs). Waits for
        calls in flight on other threads; calls after it raise ValueError."""
        self._finalizer()

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
