"""An engine over a model: where generations are submitted and stepped."""
from __future__ import annotations

import dataclasses
import weakref
from typing import Iterable, Mapping, Sequence

from . import capi
from ._enums import TokenizeFlags
from ._generation import Generation
from ._handle import Handle
from ._model import Model
from ._params import EngineParams, SamplingParams
from ._structs import from_struct


@dataclasses.dataclass(frozen=True)
class StepReport:
    """pulse_step_report: what one step did."""

    scheduled: int
    prefill_tokens: int
    decode_tokens: int
    pending: int


@dataclasses.dataclass(frozen=True)
class EngineStats:
    """pulse_engine_stats: totals since the engine was created, and its state now."""

    steps: int
    prefill_tokens: int
    decode_tokens: int
    generated_tokens: int
    finished_requests: int
    queued: int
    running: int
    kv_blocks: int
    kv_blocks_in_use: int
    sparse_selections: int
    sparse_candidate_blocks: int
    sparse_picked_blocks: int
    sparse_reused_blocks: int
    sparse_attended_tokens: int
    sparse_context_tokens: int
    host_blocks: int
    host_blocks_in_use: int
    slot_blocks: int
    slot_blocks_in_use: int
    recall_bytes: int
    recall_transfers: int
    recall_plans: int
    recall_ms: float
    writeback_bytes: int
    slot_hits: int
    slot_misses: int
    slot_evictions: int
    selection_ms: float
    host_waits: int
    admitted_resident: int
    admitted_offloaded: int
    admission_io_waits: int
    link_gb_s: float
    recall_mb_per_row: float
    step_compute_ms: float
    predicted_recall_ms: float
    running_offloaded: int
    kv_memory_bytes: int
    split_steps: int
    probe_steps: int
    micro_batches: int
    demoted_requests: int
    promoted_requests: int
    retried_steps: int
    staged_requests: int
    staged_recall_bytes: int
    lowered_budgets: int
    prefix_hits: int
    prefix_hit_tokens: int
    host_blocks_cached: int


class Engine:
    """An engine (pulse_engine) batching the generations submitted to it. It is safe to use
    from several threads: each may iterate its own generations, which step the engine (a step
    releases the GIL, and concurrent steps take turns). close() waits for calls in flight."""

    def __init__(self, model: Model, params: EngineParams | None = None) -> None:
        with model._handle.use() as pointer:
            _, engine = capi.pulse_engine_create(pointer, (params or EngineParams())._struct())
        self._handle = Handle(engine, capi.pulse_engine_free, "engine")
        self._finalizer = weakref.finalize(self, self._handle.close)
        self._has_tokenizer = model.info.tokenizer != ""

    def generate(self, prompt: str | bytes | Sequence[int],
                 sampling: SamplingParams | None = None, *,
                 tokenize_flags: TokenizeFlags = TokenizeFlags.DEFAULT) -> Generation:
        """Submits a generation: `prompt` is text (str, or UTF-8 bytes) encoded with
        `tokenize_flags`, or token ids. Returns it as an iterator of its tokens."""
        struct = (sampling or SamplingParams())._struct()
        with self._handle.use() as engine:
            if isinstance(prompt, (str, bytes)):
                _, request_id = capi.pulse_request_submit_text(engine, prompt, tokenize_flags,
                                                               struct)
            else:
                _, request_id = capi.pulse_request_submit(engine, prompt, struct)
        return Generation(self, request_id)

    def chat(self, messages: Iterable[Mapping[str, str]],
             sampling: SamplingParams | None = None) -> Generation:
        """Submits a conversation (llama-cpp-python's create_chat_completion, vLLM's LLM.chat):
        `messages` are mappings with "role" ("system", "user" or "assistant") and "content",
        formatted with the model's chat template and its generation prompt, the template's
        markers read as special tokens. NotFoundError when the model has no chat template."""
        pairs = [(message["role"], message["content"]) for message in messages]
        struct = (sampling or SamplingParams())._struct()
        with self._handle.use() as engine:
            _, request_id = capi.pulse_request_submit_chat(engine, pairs, struct)
        return Generation(self, request_id)

    def generate_batch(self, prompts: Iterable[str | bytes | Sequence[int]],
                       sampling: SamplingParams | Sequence[SamplingParams] | None = None, *,
                       tokenize_flags: TokenizeFlags = TokenizeFlags.DEFAULT
                       ) -> list[Generation]:
        """Submits every prompt at once (they share the engine's steps), runs the engine until
        it is idle and returns their generations, finished, in the prompts' order (vLLM's
        LLM.generate over a list). `sampling` is one for all or one a prompt. If a prompt is
        refused, the ones submitted before it are cancelled and the error raised."""
        prompts = list(prompts)
        if sampling is None or isinstance(sampling, SamplingParams):
            samplings = [sampling] * len(prompts)
        else:
            samplings = list(sampling)
            if len(samplings) != len(prompts):
                raise ValueError(f"{len(samplings)} sampling params for {len(prompts)} prompts")
        generations: list[Generation] = []
        try:
            for prompt, params in zip(prompts, samplings):
                generations.append(self.generate(prompt, params, tokenize_flags=tokenize_flags))
        except BaseException:
            for generation in generations:
                generation.close()
            raise
        self.run()
        return generations

    def step(self) -> StepReport:
        """Runs one step: admits queued requests, then one forward pass over the batch."""
        report = capi.pulse_step_report()
        with self._handle.use() as engine:
            capi.pulse_engine_step(engine, report)
        return from_struct(StepReport, report)

    def run(self) -> None:
        """Steps until no request is queued or running."""
        with self._handle.use() as engine:
            capi.pulse_engine_run(engine)

    def stats(self) -> EngineStats:
        stats = capi.pulse_engine_stats()
        with self._handle.use() as engine:
            capi.pulse_engine_stats_get(engine, stats)
        return from_struct(EngineStats, stats)

    @property
    def closed(self) -> bool:
        return self._handle.closed

    def close(self) -> None:
        """Frees the engine and its requests, once the calls in flight on other threads have
        returned; its generations then end, and calls raise ValueError."""
        self._finalizer()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
