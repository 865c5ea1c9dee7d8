//! How an engine schedules and how large its KV cache is: `pulse_engine_params`.

use std::mem;

use pulseinfer_sys as sys;

/// Parameters of [`Engine::new`](crate::Engine::new); the defaults are the library's
/// (`pulse_engine_params_init`).
#[derive(Clone, Copy, Debug)]
pub struct EngineParams {
    raw: sys::pulse_engine_params,
}

impl Default for EngineParams {
    fn default() -> Self {
        let mut raw = sys::pulse_engine_params::default();
        // SAFETY: raw is a valid struct of the size passed.
        let status = unsafe { sys::pulse_engine_params_init(&mut raw, mem::size_of_val(&raw)) };
        assert_eq!(status, sys::PULSE_OK, "pulse_engine_params_init refused its own struct");
        EngineParams { raw }
    }
}

impl EngineParams {
    /// Sequences in one step (default 16).
    pub fn max_batch(mut self, sequences: i32) -> Self {
        self.raw.max_batch = sequences;
        self
    }

    /// Prompt tokens of one request in one step (default 256).
    pub fn prefill_chunk(mut self, tokens: i32) -> Self {
        self.raw.prefill_chunk = tokens;
        self
    }

    /// Tokens, prefill plus decode, in one step (default 512).
    pub fn max_step_tokens(mut self, tokens: i32) -> Self {
        self.raw.max_step_tokens = tokens;
        self
    }

    /// Tokens of one KV block, the unit offload selects; 0 (the default) is the library's choice:
    /// `PULSE_OFFLOAD_BLOCK_TOKENS` (4) with offload, `PULSE_DENSE_BLOCK_TOKENS` (8) without.
    pub fn block_tokens(mut self, tokens: i32) -> Self {
        self.raw.block_tokens = tokens;
        self
    }

    /// Prompt plus generated tokens of a request; 0 (the default) is the model's context.
    pub fn max_context(mut self, tokens: i32) -> Self {
        self.raw.max_context = tokens;
        self
    }

    /// The KV cache's size in tokens; 0 (the default): 8 full contexts, capped by the backend's
    /// memory (pulseinfer.h says how).
    pub fn kv_capacity_tokens(mut self, tokens: i64) -> Self {
        self.raw.kv_capacity_tokens = tokens;
        self
    }

    /// The device memory the KV may use in all (cache, offload slots and summaries), when
    /// `kv_capacity_tokens` is 0; 0 (the default): no such cap.
    pub fn kv_memory_bytes(mut self, bytes: i64) -> Self {
        self.raw.kv_memory_bytes = bytes;
        self
    }

    /// Sparse decode attention (pulseinfer.h, `offload_mode`): off (the default), head-wise or
    /// SoloHead block selection.
    pub fn offload_mode(mut self, mode: OffloadMode) -> Self {
        self.raw.offload_mode = mode as i32;
        self
    }

    /// Tokens a sparse decode step attends to at most, sinks and window included (default 2048).
    pub fn offload_budget_tokens(mut self, tokens: i32) -> Self {
        self.raw.offload_budget_tokens = tokens;
        self
    }

    /// The first tokens a sparse decode step always attends to (default 4).
    pub fn offload_sink_tokens(mut self, tokens: i32) -> Self {
        self.raw.offload_sink_tokens = tokens;
        self
    }

    /// The last tokens a sparse decode step always attends to (default 16).
    pub fn offload_window_tokens(mut self, tokens: i32) -> Self {
        self.raw.offload_window_tokens = tokens;
        self
    }

    /// How recalled KV blocks move from the host tier to the device (default
    /// [`CopyExecutor::Auto`]).
    pub fn offload_executor(mut self, executor: CopyExecutor) -> Self {
        self.raw.offload_executor = executor as i32;
        self
    }

    /// Which cached block leaves a device-tier slot when a recalled block needs it (default
    /// [`Eviction::Lru`]).
    pub fn offload_eviction(mut self, eviction: Eviction) -> Self {
        self.raw.offload_eviction = eviction as i32;
        self
    }

    /// The host tier's capacity in tokens (of every layer); 0 (the default): 8 full contexts, at
    /// most 4 GiB.
    pub fn offload_host_tokens(mut self, tokens: i64) -> Self {
        self.raw.offload_host_tokens = tokens;
        self
    }

    /// The device tier's slots in tokens; a decoding request's budget takes up to
    /// budget / block_tokens of them at once. 0 (the default): max_batch budgets, at most 1 GiB.
    pub fn offload_slot_tokens(mut self, tokens: i64) -> Self {
        self.raw.offload_slot_tokens = tokens;
        self
    }

    /// Whether decode steps replay as CUDA graphs (the default: the same results, fewer
    /// launches); no effect on the CPU backend.
    pub fn decode_graphs(mut self, on: bool) -> Self {
        self.raw.decode_graphs = i32::from(on);
        self
    }

    /// How a block's key summary scores against a query, in [0, 1]: 1 is Quest's upper bound of
    /// q.k over the block, 0 (the default) the q.k of the key range's center.
    pub fn offload_summary_radius(mut self, radius: f64) -> Self {
        self.raw.offload_summary_radius = radius;
        self
    }

    /// Boxes of consecutive tokens a block's key summary keeps, the block scored as its best
    /// box: 0 (the default) one a token (every key scored exactly), 1 one a block (Quest's page
    /// summary), otherwise a divisor of block_tokens.
    pub fn offload_summary_boxes(mut self, boxes: i32) -> Self {
        self.raw.offload_summary_boxes = boxes;
        self
    }

    /// How block summaries are stored (default [`SummaryPrecision::Int4`]).
    pub fn offload_summary_precision(mut self, precision: SummaryPrecision) -> Self {
        self.raw.offload_summary_precision = precision as i32;
        self
    }

    /// Which requests an offloading engine offloads (default [`Admission::IoAdaptive`]).
    pub fn offload_admission(mut self, admission: Admission) -> Self {
        self.raw.offload_admission = admission as i32;
        self
    }

    /// For benchmarks of recall: in (0, 1), offloaded steps pick blocks drawn at random so that
    /// about this share of the picks stays picked the next step; 0 (the default): picks by
    /// score.
    pub fn offload_synthetic_reuse(mut self, reuse: f64) -> Self {
        self.raw.offload_synthetic_reuse = reuse;
        self
    }

    /// The micro-batches a decode step runs as, their layers interleaved so that one's recall
    /// lands while another computes: 0 (the default) chosen each step (one, unless an
    /// offloading engine's recall would take at least a quarter of the step's compute time:
    /// then two or one, whichever it has measured faster); 1 to 8: every decode step of at
    /// least that many requests.
    pub fn micro_batches(mut self, count: i32) -> Self {
        self.raw.micro_batches = count;
        self
    }

    /// Whether the blocks an offloaded request stops keeping resident also fill the free device
    /// slots, so that its first picks of them are hits (the default), or only the host tier
    /// keeps them and every first pick of one is recalled.
    pub fn offload_fill_free_slots(mut self, fill: bool) -> Self {
        self.raw.offload_fill_free_slots = i32::from(fill);
        self
    }

    /// Under [`Admission::IoAdaptive`], the least budget in tokens (at most the offload budget)
    /// that admission may give a request whose recall at the full budget would not keep up
    /// with compute: halved until it does, down to this one, instead of waiting. 0 (the
    /// default): budgets are never lowered.
    pub fn offload_min_budget_tokens(mut self, tokens: i32) -> Self {
        self.raw.offload_min_budget_tokens = tokens;
        self
    }

    /// How the host tier stores offloaded blocks (default [`HostCodec::Raw`]).
    pub fn offload_host_codec(mut self, codec: HostCodec) -> Self {
        self.raw.offload_host_codec = codec as i32;
        self
    }

    /// Prefix caching of the host tier (default off): a prompt's full blocks stay cached there
    /// once it decodes, and a later offloaded prompt that starts with them shares them and skips
    /// their prefill.
    pub fn offload_prefix_cache(mut self, on: bool) -> Self {
        self.raw.offload_prefix_cache = i32::from(on);
        self
    }

    pub(crate) fn as_raw(&self) -> &sys::pulse_engine_params {
        &self.raw
    }
}

/// Sparse decode attention (`pulse_offload_mode_code`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum OffloadMode {
    /// For a request ([`SamplingParams::offload_mode`](crate::SamplingParams::offload_mode),
    /// its default): as its engine does. Not an engine's mode.
    Engine = sys::PULSE_OFFLOAD_ENGINE as i32,
    /// Dense attention.
    Off = sys::PULSE_OFFLOAD_OFF as i32,
    /// One block set a KV head.
    HeadWise = sys::PULSE_OFFLOAD_HEADWISE as i32,
    /// One block set a layer, shared by every KV head.
    SoloHead = sys::PULSE_OFFLOAD_SOLOHEAD as i32,
}

/// How recalled KV blocks move from the host tier to the device (`pulse_copy_executor_code`);
/// the CPU backend copies on a thread whatever is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum CopyExecutor {
    /// Gather below 64 KiB a chunk on average, batch DMA above.
    Auto = sys::PULSE_COPY_AUTO as i32,
    /// A kernel on a few SMs reading mapped host memory.
    Gather = sys::PULSE_COPY_GATHER as i32,
    /// One `cudaMemcpyBatchAsync`.
    BatchDma = sys::PULSE_COPY_BATCH_DMA as i32,
    /// One `cudaMemcpyAsync` a chunk (the baseline).
    PerChunk = sys::PULSE_COPY_PER_CHUNK as i32,
}

/// How the host tier stores offloaded blocks (`pulse_host_codec_code`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum HostCodec {
    /// As the device holds them.
    Raw = sys::PULSE_HOST_CODEC_RAW as i32,
    /// fp8 E4M3 with a scale per KV head's keys or values: half a bf16 block's host memory and
    /// recall, a quarter of an f32 block's, attended to fp8's precision.
    Fp8 = sys::PULSE_HOST_CODEC_FP8 as i32,
}

/// Which cached block leaves a device-tier slot when a recalled block needs it
/// (`pulse_eviction_code`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Eviction {
    /// The least recently selected.
    Lru = sys::PULSE_EVICT_LRU as i32,
    /// The lowest latest selection score.
    Score = sys::PULSE_EVICT_SCORE as i32,
}

/// How block summaries are stored (`pulse_summary_precision_code`): every backend stores their
/// rows at this precision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum SummaryPrecision {
    /// Unrounded.
    F32 = sys::PULSE_SUMMARY_F32 as i32,
    /// Rounded to bfloat16.
    Bf16 = sys::PULSE_SUMMARY_BF16 as i32,
    /// Rounded to int8 with a scale a row.
    Int8 = sys::PULSE_SUMMARY_INT8 as i32,
    /// Rounded to int4, two a byte, with a scale a row (an even head_dim).
    Int4 = sys::PULSE_SUMMARY_INT4 as i32,
}

/// How an offloading engine places the requests that take its offloading
/// (`pulse_admission_code`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Admission {
    /// Resident while it fits the KV cache; otherwise offloaded while the predicted recall time
    /// of a decode step stays within its measured compute time; otherwise it waits.
    IoAdaptive = sys::PULSE_ADMIT_IO_ADAPTIVE as i32,
    /// Every request offloaded.
    OffloadEvery = sys::PULSE_ADMIT_OFFLOAD_EVERY as i32,
}
