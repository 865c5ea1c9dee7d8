"""The ABI's enumerations and flag sets, with the values pulseinfer.h gives them."""
from __future__ import annotations

import enum

from . import capi


class Feature(enum.IntFlag):
    """Bits of pulseinfer.features() (PULSE_FEATURE_*); later versions may set others."""

    CPU = capi.PULSE_FEATURE_CPU
    CUDA_COMPILED = capi.PULSE_FEATURE_CUDA_COMPILED
    CUDA_DEVICE = capi.PULSE_FEATURE_CUDA_DEVICE


class TokenizeFlags(enum.IntFlag):
    """How text becomes tokens (PULSE_TOKENIZE_*). DEFAULT for plain text; PARSE_SPECIAL alone
    for the output of Model.apply_chat_template, which already holds the template's BOS text."""

    ADD_SPECIAL = capi.PULSE_TOKENIZE_ADD_SPECIAL
    PARSE_SPECIAL = capi.PULSE_TOKENIZE_PARSE_SPECIAL
    DEFAULT = capi.PULSE_TOKENIZE_DEFAULT


class DetokenizeFlags(enum.IntFlag):
    """How tokens become text (PULSE_DETOKENIZE_*)."""

    RENDER_SPECIAL = capi.PULSE_DETOKENIZE_RENDER_SPECIAL


class RequestState(enum.IntEnum):
    """PULSE_REQUEST_*."""

    QUEUED = capi.PULSE_REQUEST_QUEUED
    RUNNING = capi.PULSE_REQUEST_RUNNING
    FINISHED = capi.PULSE_REQUEST_FINISHED


class FinishReason(enum.IntEnum):
    """Why a request finished (PULSE_FINISH_*); str() is the library's name for it."""

    NONE = capi.PULSE_FINISH_NONE
    MAX_TOKENS = capi.PULSE_FINISH_MAX_TOKENS
    STOP_TOKEN = capi.PULSE_FINISH_STOP_TOKEN
    CONTEXT = capi.PULSE_FINISH_CONTEXT
    CANCELLED = capi.PULSE_FINISH_CANCELLED
    CAPACITY = capi.PULSE_FINISH_CAPACITY
    ERROR = capi.PULSE_FINISH_ERROR
    STOP_STRING = capi.PULSE_FINISH_STOP_STRING

    def __str__(self) -> str:
        return capi.pulse_finish_reason_string(self.value)


class OffloadMode(enum.IntEnum):
    """pulse_offload_mode_code: offloaded sparse decode attention (EngineParams.offload_mode;
    SamplingParams.offload_mode, where ENGINE, the default, means as the engine)."""

    ENGINE = capi.PULSE_OFFLOAD_ENGINE
    OFF = capi.PULSE_OFFLOAD_OFF
    HEADWISE = capi.PULSE_OFFLOAD_HEADWISE
    SOLOHEAD = capi.PULSE_OFFLOAD_SOLOHEAD


class CopyExecutor(enum.IntEnum):
    """pulse_copy_executor_code: how recalled KV blocks move from the host tier to the device
    (EngineParams.offload_executor); the CPU backend copies on a thread whatever is chosen."""

    AUTO = capi.PULSE_COPY_AUTO
    GATHER = capi.PULSE_COPY_GATHER
    BATCH_DMA = capi.PULSE_COPY_BATCH_DMA
    PER_CHUNK = capi.PULSE_COPY_PER_CHUNK


class HostCodec(enum.IntEnum):
    """pulse_host_codec_code: how the host tier stores offloaded blocks
    (EngineParams.offload_host_codec). FP8 keeps fp8 E4M3 with a scale per KV head's keys or
    values: half a bf16 block's host memory and recall, a quarter of an f32 block's."""

    RAW = capi.PULSE_HOST_CODEC_RAW
    FP8 = capi.PULSE_HOST_CODEC_FP8


class Eviction(enum.IntEnum):
    """pulse_eviction_code: which cached block leaves a device-tier slot for a recalled one
    (EngineParams.offload_eviction)."""

    LRU = capi.PULSE_EVICT_LRU
    SCORE = capi.PULSE_EVICT_SCORE


class SummaryPrecision(enum.IntEnum):
    """pulse_summary_precision_code: how block summaries are stored
    (EngineParams.offload_summary_precision); INT8 and INT4 keep a scale a row,
    INT4 packs two values a byte (an even head_dim)."""

    F32 = capi.PULSE_SUMMARY_F32
    BF16 = capi.PULSE_SUMMARY_BF16
    INT8 = capi.PULSE_SUMMARY_INT8
    INT4 = capi.PULSE_SUMMARY_INT4


class Admission(enum.IntEnum):
    """pulse_admission_code: how an offloading engine places requests
    (EngineParams.offload_admission). IO_ADAPTIVE runs a request resident while it fits the KV
    cache and offloads the others while recall keeps up with compute; OFFLOAD_EVERY offloads
    every request."""

    IO_ADAPTIVE = capi.PULSE_ADMIT_IO_ADAPTIVE
    OFFLOAD_EVERY = capi.PULSE_ADMIT_OFFLOAD_EVERY
