"""Parameters of a model load, an engine and a request: the C parameter structs as frozen
dataclasses. The defaults are the library's (read from its *_init functions); the fields and
their meaning are those of pulseinfer.h, which checks the values."""
from __future__ import annotations

import dataclasses
from typing import Sequence

from . import capi
from ._enums import Admission, CopyExecutor, Eviction, HostCodec, OffloadMode, SummaryPrecision
from ._structs import to_struct

_MODEL = capi.pulse_model_params()
_ENGINE = capi.pulse_engine_params()
_SAMPLING = capi.pulse_sampling_params()


@dataclasses.dataclass(frozen=True)
class ModelParams:
    """pulse_model_params. With random_weights, the path given to Model names a Hugging Face
    config.json (or its directory) and the weights are random values seeded by random_seed."""

    threads: int = _MODEL.threads
    backend: str = _MODEL.backend
    weight_type: str = _MODEL.weight_type
    random_seed: int = _MODEL.random_seed
    memory_limit_bytes: int = _MODEL.memory_limit_bytes
    random_weights: bool = bool(_MODEL.random_weights)
    tensor_parallel_size: int = _MODEL.tensor_parallel_size

    def _struct(self) -> capi.pulse_model_params:
        return to_struct(self, capi.pulse_model_params())


@dataclasses.dataclass(frozen=True)
class EngineParams:
    """pulse_engine_params."""

    max_batch: int = _ENGINE.max_batch
    prefill_chunk: int = _ENGINE.prefill_chunk
    max_step_tokens: int = _ENGINE.max_step_tokens
    # Tokens of one KV block; 0 (the default) the library's choice: 4 with offload, 8 without.
    block_tokens: int = _ENGINE.block_tokens
    max_context: int = _ENGINE.max_context
    kv_capacity_tokens: int = _ENGINE.kv_capacity_tokens
    # The device memory the KV may use in all (cache, offload slots and summaries), when
    # kv_capacity_tokens is 0; 0: no such cap.
    kv_memory_bytes: int = _ENGINE.kv_memory_bytes
    offload_mode: OffloadMode = OffloadMode(_ENGINE.offload_mode)
    offload_budget_tokens: int = _ENGINE.offload_budget_tokens
    offload_sink_tokens: int = _ENGINE.offload_sink_tokens
    offload_window_tokens: int = _ENGINE.offload_window_tokens
    offload_executor: CopyExecutor = CopyExecutor(_ENGINE.offload_executor)
    offload_eviction: Eviction = Eviction(_ENGINE.offload_eviction)
    offload_host_tokens: int = _ENGINE.offload_host_tokens
    offload_slot_tokens: int = _ENGINE.offload_slot_tokens
    # Replay decode steps as CUDA graphs (the same results, fewer launches); no effect on the CPU.
    decode_graphs: bool = bool(_ENGINE.decode_graphs)
    # How a block's key summary scores against a query, in [0, 1]: 1 Quest's upper bound of q.k,
    # 0 (the default) the q.k of the key range's center.
    offload_summary_radius: float = _ENGINE.offload_summary_radius
    # Boxes of consecutive tokens a block's key summary keeps, the block scored as its best box:
    # 0 (the default) one a token (every key scored exactly), 1 one a block (Quest's page
    # summary), otherwise a divisor of block_tokens.
    offload_summary_boxes: int = _ENGINE.offload_summary_boxes
    # How summaries are stored: their rows' precision (INT4 by default).
    offload_summary_precision: SummaryPrecision = SummaryPrecision(
        _ENGINE.offload_summary_precision)
    # Which requests an offloading engine offloads: by default those that do not fit the KV
    # cache, while recall keeps up with compute.
    offload_admission: Admission = Admission(_ENGINE.offload_admission)
    # For benchmarks of recall: in (0, 1), offloaded steps pick blocks drawn at random so that
    # about this share of the picks stays picked the next step (0: picks by score).
    offload_synthetic_reuse: float = _ENGINE.offload_synthetic_reuse
    # The micro-batches a decode step runs as, their layers interleaved so that one's recall
    # lands while another computes: 0 (the default) chosen each step, 1 to 8 fixed.
    micro_batches: int = _ENGINE.micro_batches
    # 1 (the default): the blocks an offloaded request stops keeping resident also fill the
    # free device slots, so that its first picks of them are hits; 0: the host tier alone keeps
    # them, and every first pick of one is recalled.
    offload_fill_free_slots: int = _ENGINE.offload_fill_free_slots
    # Under Admission.IO_ADAPTIVE, the least budget (at most offload_budget_tokens) admission may
    # give a request whose recall at the full budget would not keep up with compute: halved
    # until it does, down to this one, instead of waiting. 0 (the default): never lowered.
    offload_min_budget_tokens: int = _ENGINE.offload_min_budget_tokens
    # How the host tier stores offloaded blocks: HostCodec.RAW (the default) as the device holds
    # them, HostCodec.FP8 as fp8 with a scale per KV head's keys or values (fewer bytes held and
    # recalled, attention to fp8's precision).
    offload_host_codec: HostCodec = HostCodec(_ENGINE.offload_host_codec)
    # 1: prefix caching of the host tier (a prompt's full blocks stay cached there once it
    # decodes, and a later offloaded prompt that starts with them shares them and skips their
    # prefill); 0 (the default): off.
    offload_prefix_cache: int = _ENGINE.offload_prefix_cache

    def _struct(self) -> capi.pulse_engine_params:
        return to_struct(self, capi.pulse_engine_params())


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """pulse_sampling_params. temperature 0 is greedy. A stop string ends the text just before
    it; a stop token is the last token of the output."""

    temperature: float = _SAMPLING.temperature
    top_p: float = _SAMPLING.top_p
    min_p: float = _SAMPLING.min_p
    repetition_penalty: float = _SAMPLING.repetition_penalty
    top_k: int = _SAMPLING.top_k
    max_tokens: int = _SAMPLING.max_tokens
    ignore_eos: bool = bool(_SAMPLING.ignore_eos)
    seed: int = _SAMPLING.seed
    stop_token_ids: Sequence[int] = ()
    stop_strings: Sequence[str] = ()
    # The request's own offloading within its engine's: ENGINE (as the engine), OFF (dense) or
    # the engine's mode; sizes 0 / -1 are the engine's.
    offload_mode: OffloadMode = OffloadMode(_SAMPLING.offload_mode)
    offload_budget_tokens: int = _SAMPLING.offload_budget_tokens
    offload_sink_tokens: int = _SAMPLING.offload_sink_tokens
    offload_window_tokens: int = _SAMPLING.offload_window_tokens

    def _struct(self) -> capi.pulse_sampling_params:
        struct = to_struct(self, capi.pulse_sampling_params(),
                           skip=("stop_token_ids", "stop_strings"))
        struct.set_stop_token_ids(self.stop_token_ids)
        struct.set_stop_strings(self.stop_strings)
        return struct
