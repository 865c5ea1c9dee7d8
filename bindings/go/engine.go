package pulseinfer

// #include <pulseinfer/pulseinfer.h>
// #include "token_callback.h"
import "C"

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"
)

// ErrEngineClosed is the error of a call on a closed Engine, and of the requests that Close
// ended.
var ErrEngineClosed = errors.New("pulseinfer: the engine is closed")

// EngineParams are the options of NewEngine. DefaultEngineParams has the library's defaults.
type EngineParams struct {
	MaxBatch      int32 // sequences in one step
	PrefillChunk  int32 // prompt tokens of one request in one step
	MaxStepTokens int32 // tokens (prefill plus decode) in one step
	BlockTokens   int32 // tokens of one KV block; 0: the library's choice (4 offloading, else 8)
	MaxContext    int32 // prompt plus generated tokens; 0: the model's context
	// KVCapacityTokens is the KV cache's size in tokens; 0: 8 full contexts, capped by the
	// backend's memory (pulseinfer.h says how).
	KVCapacityTokens int64
	// KVMemoryBytes caps the device memory the KV may use in all (cache, offload slots and
	// summaries) when KVCapacityTokens is 0; 0: no such cap.
	KVMemoryBytes int64
	// Sparse decode attention (pulse_engine_params.offload_*): OffloadOff, OffloadHeadWise or
	// OffloadSoloHead, the tokens a decode step attends to at most, and the first and last
	// tokens it always attends to.
	OffloadMode         OffloadMode
	OffloadBudgetTokens int32
	OffloadSinkTokens   int32
	OffloadWindowTokens int32
	// The offloaded KV's tiers: how recalled blocks move to the device (OffloadExecutor), which
	// cached block leaves a device-tier slot for a recalled one (OffloadEviction), the host
	// tier's capacity in tokens of every layer (0: 8 full contexts, at most 4 GiB) and the
	// device tier's slots in tokens (0: MaxBatch budgets, at most 1 GiB).
	OffloadExecutor   CopyExecutor
	OffloadEviction   Eviction
	OffloadHostTokens int64
	OffloadSlotTokens int64
	// NoDecodeGraphs launches every op of every decode step instead of replaying each step as a
	// CUDA graph (the zero value, as the library's default: the same results, fewer launches).
	NoDecodeGraphs bool
	// OffloadSummaryRadius is how a block's key summary scores against a query, in [0, 1]: 1
	// Quest's upper bound of q.k, 0 (the zero value, as the library's default) the q.k of the key
	// range's center.
	OffloadSummaryRadius float64
	// OffloadSummaryBoxes is how many boxes of consecutive tokens a block's key summary keeps, the
	// block scored as its best box: 0 (the zero value, as the library's default) one a token
	// (every key scored exactly), 1 one a block (Quest's page summary), otherwise a divisor of
	// BlockTokens.
	OffloadSummaryBoxes int32
	// OffloadSummaryPrecision is how summaries are stored (the library's default is SummaryInt4,
	// not the zero value, SummaryF32).
	OffloadSummaryPrecision SummaryPrecision
	// OffloadAdmission is which requests an offloading engine offloads (the zero value,
	// AdmissionIOAdaptive, is the library's default).
	OffloadAdmission Admission
	// OffloadSyntheticReuse, for benchmarks of recall: in (0, 1), offloaded steps pick blocks
	// drawn at random so that about this share of the picks stays picked the next step; 0: picks
	// by score.
	OffloadSyntheticReuse float64
	// MicroBatches is how many micro-batches a decode step runs as, their layers interleaved so
	// that one's recall lands while another computes: 0 (the library's default) chosen each
	// step, 1 to 8 fixed.
	MicroBatches int32
	// NoFillFreeSlots keeps the blocks an offloaded request stops keeping resident in the host
	// tier alone, so that every first pick of one is recalled; by default (false) they also fill
	// the free device slots, where its first picks of them are hits.
	NoFillFreeSlots bool
	// OffloadMinBudgetTokens is, under AdmissionIOAdaptive, the least budget (at most
	// OffloadBudgetTokens) admission may give a request whose recall at the full budget would not
	// keep up with compute: halved until it does, down to this one, instead of waiting. 0 (the
	// default): budgets are never lowered.
	OffloadMinBudgetTokens int32
	// OffloadHostCodec is how the host tier stores offloaded blocks (HostCodecRaw, the default,
	// or HostCodecFP8).
	OffloadHostCodec HostCodec
	// OffloadPrefixCache turns on prefix caching of the host tier: a prompt's full blocks stay
	// cached there once it decodes, and a later offloaded prompt that starts with them shares
	// them and skips their prefill.
	OffloadPrefixCache bool
}

// OffloadMode selects sparse decode attention (pulse_offload_mode_code).
type OffloadMode int32

const (
	OffloadOff      OffloadMode = C.PULSE_OFFLOAD_OFF
	OffloadHeadWise OffloadMode = C.PULSE_OFFLOAD_HEADWISE
	OffloadSoloHead OffloadMode = C.PULSE_OFFLOAD_SOLOHEAD
)

// CopyExecutor selects how recalled KV blocks move from the host tier to the device
// (pulse_copy_executor_code); the CPU backend copies on a thread whatever is chosen.
type CopyExecutor int32

const (
	CopyAuto     CopyExecutor = C.PULSE_COPY_AUTO      // gather for small chunks, batch DMA for large
	CopyGather   CopyExecutor = C.PULSE_COPY_GATHER    // a kernel reading mapped host memory
	CopyBatchDMA CopyExecutor = C.PULSE_COPY_BATCH_DMA // one cudaMemcpyBatchAsync
	CopyPerChunk CopyExecutor = C.PULSE_COPY_PER_CHUNK // one cudaMemcpyAsync a chunk
)

// HostCodec selects how the host tier stores offloaded blocks (pulse_host_codec_code).
type HostCodec int32

const (
	HostCodecRaw HostCodec = C.PULSE_HOST_CODEC_RAW // as the device holds them
	// HostCodecFP8 keeps fp8 E4M3 with a scale per KV head's keys or values: half a bf16 block's
	// host memory and recall, a quarter of an f32 block's, attended to fp8's precision.
	HostCodecFP8 HostCodec = C.PULSE_HOST_CODEC_FP8
)

// Eviction selects which cached block leaves a device-tier slot when a recalled block needs it
// (pulse_eviction_code).
type Eviction int32

const (
	EvictLRU   Eviction = C.PULSE_EVICT_LRU   // the least recently selected
	EvictScore Eviction = C.PULSE_EVICT_SCORE // the lowest latest selection score
)

// Admission selects how an offloading engine places the requests that take its offloading
// (pulse_admission_code).
type Admission int32

const (
	// AdmissionIOAdaptive runs a request resident while it fits the KV cache, otherwise
	// offloaded while the predicted recall time of a decode step stays within its measured
	// compute time, otherwise it waits.
	AdmissionIOAdaptive   Admission = C.PULSE_ADMIT_IO_ADAPTIVE
	AdmissionOffloadEvery Admission = C.PULSE_ADMIT_OFFLOAD_EVERY // every request offloaded
)

// SummaryPrecision selects how block summaries are stored (pulse_summary_precision_code): every
// backend stores their rows at this precision.
type SummaryPrecision int32

const (
	SummaryF32  SummaryPrecision = C.PULSE_SUMMARY_F32  // unrounded
	SummaryBF16 SummaryPrecision = C.PULSE_SUMMARY_BF16 // rounded to bfloat16
	SummaryInt8 SummaryPrecision = C.PULSE_SUMMARY_INT8 // rounded to int8 with a scale a row
	SummaryInt4 SummaryPrecision = C.PULSE_SUMMARY_INT4 // int4, two a byte, a scale a row
)

// DefaultEngineParams returns the library's defaults (pulse_engine_params_init).
func DefaultEngineParams() EngineParams {
	var params C.pulse_engine_params
	C.pulse_engine_params_init(&params, C.sizeof_pulse_engine_params) // cannot fail: the header's own size
	return EngineParams{
		MaxBatch:                int32(params.max_batch),
		PrefillChunk:            int32(params.prefill_chunk),
		MaxStepTokens:           int32(params.max_step_tokens),
		BlockTokens:             int32(params.block_tokens),
		MaxContext:              int32(params.max_context),
		KVCapacityTokens:        int64(params.kv_capacity_tokens),
		KVMemoryBytes:           int64(params.kv_memory_bytes),
		OffloadMode:             OffloadMode(params.offload_mode),
		OffloadBudgetTokens:     int32(params.offload_budget_tokens),
		OffloadSinkTokens:       int32(params.offload_sink_tokens),
		OffloadWindowTokens:     int32(params.offload_window_tokens),
		OffloadExecutor:         CopyExecutor(params.offload_executor),
		OffloadEviction:         Eviction(params.offload_eviction),
		OffloadHostTokens:       int64(params.offload_host_tokens),
		OffloadSlotTokens:       int64(params.offload_slot_tokens),
		NoDecodeGraphs:          params.decode_graphs == 0,
		OffloadSummaryRadius:    float64(params.offload_summary_radius),
		OffloadSummaryBoxes:     int32(params.offload_summary_boxes),
		OffloadSummaryPrecision: SummaryPrecision(params.offload_summary_precision),
		OffloadAdmission:        Admission(params.offload_admission),
		OffloadSyntheticReuse:   float64(params.offload_synthetic_reuse),
		MicroBatches:            int32(params.micro_batches),
		NoFillFreeSlots:         params.offload_fill_free_slots == 0,
		OffloadMinBudgetTokens:  int32(params.offload_min_budget_tokens),
		OffloadHostCodec:        HostCodec(params.offload_host_codec),
		OffloadPrefixCache:      params.offload_prefix_cache == 1,
	}
}

func (p *EngineParams) toC() C.pulse_engine_params {
	var params C.pulse_engine_params
	C.pulse_engine_params_init(&params, C.sizeof_pulse_engine_params)
	params.max_batch = C.int32_t(p.MaxBatch)
	params.prefill_chunk = C.int32_t(p.PrefillChunk)
	params.max_step_tokens = C.int32_t(p.MaxStepTokens)
	params.block_tokens = C.int32_t(p.BlockTokens)
	params.max_context = C.int32_t(p.MaxContext)
	params.kv_capacity_tokens = C.int64_t(p.KVCapacityTokens)
	params.kv_memory_bytes = C.int64_t(p.KVMemoryBytes)
	params.offload_mode = C.int32_t(p.OffloadMode)
	params.offload_budget_tokens = C.int32_t(p.OffloadBudgetTokens)
	params.offload_sink_tokens = C.int32_t(p.OffloadSinkTokens)
	params.offload_window_tokens = C.int32_t(p.OffloadWindowTokens)
	params.offload_executor = C.int32_t(p.OffloadExecutor)
	params.offload_eviction = C.int32_t(p.OffloadEviction)
	params.offload_host_tokens = C.int64_t(p.OffloadHostTokens)
	params.offload_slot_tokens = C.int64_t(p.OffloadSlotTokens)
	if p.NoDecodeGraphs {
		params.decode_graphs = 0
	}
	params.offload_summary_radius = C.double(p.OffloadSummaryRadius)
	params.offload_summary_boxes = C.int32_t(p.OffloadSummaryBoxes)
	params.offload_summary_precision = C.int32_t(p.OffloadSummaryPrecision)
	params.offload_admission = C.int32_t(p.OffloadAdmission)
	params.offload_synthetic_reuse = C.double(p.OffloadSyntheticReuse)
	params.micro_batches = C.int32_t(p.MicroBatches)
	if p.NoFillFreeSlots {
		params.offload_fill_free_slots = 0
	}
	params.offload_min_budget_tokens = C.int32_t(p.OffloadMinBudgetTokens)
	params.offload_host_codec = C.int32_t(p.OffloadHostCodec)
	if p.OffloadPrefixCache {
		params.offload_prefix_cache = 1
	}
	return params
}

// Engine generates with a model, batching every request submitted to it: methods may be called
// from any goroutine. One goroutine of its own steps the library's engine while requests are
// pending and delivers their tokens.
type Engine struct {
	loop      *engineLoop
	closeOnce sync.Once
}

// NewEngine creates an engine over model, which it keeps a reference of: the model may be
// closed first. nil params are the defaults. The KV cache is allocated now.
func NewEngine(model *Model, params *EngineParams) (*Engine, error) {
	defer runtime.KeepAlive(model)
	var cParams *C.pulse_engine_params
	maxContext := model.info.ContextLength
	if params != nil {
		filled := params.toC()
		cParams = &filled
		if params.MaxContext > 0 && params.MaxContext < maxContext {
			maxContext = params.MaxContext
		}
	}
	var engine *C.pulse_engine
	err := call(func() C.pulse_status { return C.pulse_engine_create(model.model, cParams, &engine) })
	if err != nil {
		return nil, err
	}
	e := &Engine{loop: startEngineLoop(engine, maxContext, model.info.Tokenizer != "")}
	runtime.SetFinalizer(e, (*Engine).Close)
	return e, nil
}

// Close ends the engine's requests (their Wait returns ErrEngineClosed) and frees it. It is
// idempotent.
func (e *Engine) Close() {
	e.closeOnce.Do(func() {
		runtime.SetFinalizer(e, nil)
		e.loop.close()
	})
}

// Generate queues a generation after the prompt tokens. nil sampling is the defaults. Ending
// ctx cancels it.
func (e *Engine) Generate(ctx context.Context, prompt []int32, sampling *SamplingParams) (*Request, error) {
	return e.submit(ctx, sampling, func(engine *C.pulse_engine, params *C.pulse_sampling_params,
		handle C.uintptr_t, id *C.uint64_t) C.pulse_status {
		return C.submit_streamed(engine, tokenArray(prompt), C.size_t(len(prompt)), params, handle, id)
	})
}

// GenerateText queues a generation after text, encoded with the model's tokenizer and flags:
// TokenizeDefault for plain text, TokenizeParseSpecial for the output of ApplyChatTemplate. nil
// sampling is the defaults. Ending ctx cancels it.
func (e *Engine) GenerateText(ctx context.Context, text string, flags TokenizeFlags,
	sampling *SamplingParams) (*Request, error) {
	var memory cMemory
	defer memory.free()
	cText := memory.string(text)
	return e.submit(ctx, sampling, func(engine *C.pulse_engine, params *C.pulse_sampling_params,
		handle C.uintptr_t, id *C.uint64_t) C.pulse_status {
		return C.submit_streamed_text(engine, cText, C.size_t(len(text)), C.uint32_t(flags), params, handle, id)
	})
}

// GenerateChat queues a generation after a conversation: messages formatted with the model's
// chat template and its generation prompt, the template's markers read as special tokens (as
// ApplyChatTemplate, then GenerateText with TokenizeParseSpecial). ErrNotFound when the model has
// no chat template. nil sampling is the defaults. Ending ctx cancels it.
func (e *Engine) GenerateChat(ctx context.Context, messages []ChatMessage,
	sampling *SamplingParams) (*Request, error) {
	var memory cMemory
	defer memory.free()
	cMessages := memory.chatMessages(messages)
	return e.submit(ctx, sampling, func(engine *C.pulse_engine, params *C.pulse_sampling_params,
		handle C.uintptr_t, id *C.uint64_t) C.pulse_status {
		return C.submit_streamed_chat(engine, cMessages, C.size_t(len(messages)), params, handle, id)
	})
}

// GenerateBatch queues every prompt (text, encoded with flags) at once, so that they share the
// engine's steps, and waits for them all: their results in the prompts' order. The first error
// (a prompt refused, a request that failed, ctx ending) is returned instead, and the other
// requests are cancelled.
func (e *Engine) GenerateBatch(ctx context.Context, prompts []string, flags TokenizeFlags,
	sampling *SamplingParams) ([]Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // on an error, the requests still running
	requests := make([]*Request, 0, len(prompts))
	for _, prompt := range prompts {
		request, err := e.GenerateText(ctx, prompt, flags, sampling)
		if err != nil {
			return nil, err
		}
		requests = append(requests, request)
	}
	results := make([]Result, len(requests))
	for i, request := range requests {
		result, err := request.Wait()
		if err != nil {
			return nil, err
		}
		results[i] = result
	}
	return results, nil
}

func (e *Engine) submit(ctx context.Context, sampling *SamplingParams, submit submitFunc) (*Request, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if sampling == nil {
		defaults := DefaultSamplingParams()
		sampling = &defaults
	}
	var memory cMemory
	defer memory.free()
	params := sampling.toC(&memory)
	request := &Request{
		ctx:    ctx,
		tokens: make(chan Token, e.loop.tokenBound(sampling.MaxTokens)),
		done:   make(chan struct{}),
		engine: e,
	}
	if err := e.loop.submit(request, &params, submit); err != nil {
		return nil, err
	}
	return request, nil
}

// EngineStats are an engine's totals since it was created, and its state now.
type EngineStats struct {
	Steps            int64 // steps that ran a forward pass
	PrefillTokens    int64 // prompt tokens computed
	DecodeTokens     int64 // generated tokens fed back into the model
	GeneratedTokens  int64 // tokens sampled
	FinishedRequests int64 // requests that finished, for any reason
	Queued           int32 // requests waiting now
	Running          int32 // requests in the batch now
	KVBlocks         int32 // blocks of the KV cache
	KVBlocksInUse    int32 // blocks allocated or reserved by running requests
	// Sparse decode attention: totals over every (request, layer, step, block set) selection.
	SparseSelections      int64
	SparseCandidateBlocks int64 // blocks scored
	SparsePickedBlocks    int64 // of them, selected
	SparseReusedBlocks    int64 // of those, also selected by the same set the step before
	SparseAttendedTokens  int64 // tokens the sparse rows attended to
	SparseContextTokens   int64 // tokens they would have attended to densely
	// Offloaded KV: the tiers' capacities and use now, then totals of the transfers.
	HostBlocks      int32         // blocks of the host tier
	HostBlocksInUse int32         // reserved by running requests
	SlotBlocks      int32         // device-tier slots
	SlotBlocksInUse int32         // reserved by running requests' budgets
	RecallBytes     int64         // moved host -> device
	RecallTransfers int64         // contiguous chunks moved (a block, or a head's K or V)
	RecallPlans     int64         // (step, layer) recalls that moved something
	RecallTime      time.Duration // the copy engine's time on them
	WritebackBytes  int64         // moved device -> host, each full block once a layer
	SlotHits        int64         // selected blocks found in a slot
	SlotMisses      int64         // selected blocks recalled
	SlotEvictions   int64         // cached blocks a recall displaced
	// Host time planning the steps' sparse selection (it runs on the device).
	SelectionTime time.Duration
	// Host waits for the device inside steps besides reading their tokens: 0 when the device
	// drives every step.
	HostWaits int64
	// Placement by an offloading engine: requests admitted resident and offloaded, and the times
	// the head of the queue waited for recall I/O; the rates it predicts from, averaged over
	// recent decode steps with offloaded rows (0 before the first): the link's rate, recall an
	// offloaded row costs a step, a step's time less the copy engine's time on its recalls; the
	// recall time predicted for a step of the offloaded requests running now, and how many run.
	AdmittedResident    int64
	AdmittedOffloaded   int64
	AdmissionIOWaits    int64
	LinkGBPerSecond     float64
	RecallMBPerRow      float64
	StepComputeTime     time.Duration
	PredictedRecallTime time.Duration
	RunningOffloaded    int32
	KVMemoryBytes       int64 // device bytes of the KV: cache blocks, slots and summaries
	// Layer-wise scheduling (EngineParams.MicroBatches): decode steps run as several
	// micro-batches, eligible steps the adaptive choice ran against its preference (to measure
	// both ways), and the last step's micro-batches.
	SplitSteps   int64
	ProbeSteps   int64
	MicroBatches int32
	// Placement changes of running requests (AdmissionIOAdaptive): resident requests offloaded
	// under memory pressure, and offloaded ones made resident again when memory freed.
	DemotedRequests  int64
	PromotedRequests int64
	// Steps that failed as a whole (a failed copy, the device tier exhausted mid-step) and ran
	// once more.
	RetriedSteps int64
	// Offloaded requests whose prompt the KV cache could not hold, prefilled staged (the earlier
	// chunks' KV read from the host tier a layer at a time), and the bytes those chunks recalled.
	StagedRequests    int64
	StagedRecallBytes int64
	// Offloaded requests admitted with a budget below the engine's (OffloadMinBudgetTokens).
	LoweredBudgets int64
	// Prefix caching (EngineParams.OffloadPrefixCache): offloaded requests admitted with cached
	// blocks at the start of their prompt, the prompt tokens those spared prefill, and the
	// host-tier blocks cached now (held by running requests or not).
	PrefixHits       int64
	PrefixHitTokens  int64
	HostBlocksCached int32
}

// Stats reads the engine's figures; during a step, those before or after it.
func (e *Engine) Stats() (EngineStats, error) {
	stats := C.pulse_engine_stats{struct_size: C.sizeof_pulse_engine_stats}
	err := e.loop.withEngine(func(engine *C.pulse_engine) error {
		return call(func() C.pulse_status { return C.pulse_engine_stats_get(engine, &stats) })
	})
	if err != nil {
		return EngineStats{}, err
	}
	return EngineStats{
		Steps:                 int64(stats.steps),
		PrefillTokens:         int64(stats.prefill_tokens),
		DecodeTokens:          int64(stats.decode_tokens),
		GeneratedTokens:       int64(stats.generated_tokens),
		FinishedRequests:      int64(stats.finished_requests),
		Queued:                int32(stats.queued),
		Running:               int32(stats.running),
		KVBlocks:              int32(stats.kv_blocks),
		KVBlocksInUse:         int32(stats.kv_blocks_in_use),
		SparseSelections:      int64(stats.sparse_selections),
		SparseCandidateBlocks: int64(stats.sparse_candidate_blocks),
		SparsePickedBlocks:    int64(stats.sparse_picked_blocks),
		SparseReusedBlocks:    int64(stats.sparse_reused_blocks),
		SparseAttendedTokens:  int64(stats.sparse_attended_tokens),
		SparseContextTokens:   int64(stats.sparse_context_tokens),
		HostBlocks:            int32(stats.host_blocks),
		HostBlocksInUse:       int32(stats.host_blocks_in_use),
		SlotBlocks:            int32(stats.slot_blocks),
		SlotBlocksInUse:       int32(stats.slot_blocks_in_use),
		RecallBytes:           int64(stats.recall_bytes),
		RecallTransfers:       int64(stats.recall_transfers),
		RecallPlans:           int64(stats.recall_plans),
		RecallTime:            milliseconds(stats.recall_ms),
		WritebackBytes:        int64(stats.writeback_bytes),
		SlotHits:              int64(stats.slot_hits),
		SlotMisses:            int64(stats.slot_misses),
		SlotEvictions:         int64(stats.slot_evictions),
		SelectionTime:         milliseconds(stats.selection_ms),
		HostWaits:             int64(stats.host_waits),
		AdmittedResident:      int64(stats.admitted_resident),
		AdmittedOffloaded:     int64(stats.admitted_offloaded),
		AdmissionIOWaits:      int64(stats.admission_io_waits),
		LinkGBPerSecond:       float64(stats.link_gb_s),
		RecallMBPerRow:        float64(stats.recall_mb_per_row),
		StepComputeTime:       milliseconds(stats.step_compute_ms),
		PredictedRecallTime:   milliseconds(stats.predicted_recall_ms),
		RunningOffloaded:      int32(stats.running_offloaded),
		KVMemoryBytes:         int64(stats.kv_memory_bytes),
		SplitSteps:            int64(stats.split_steps),
		ProbeSteps:            int64(stats.probe_steps),
		MicroBatches:          int32(stats.micro_batches),
		DemotedRequests:       int64(stats.demoted_requests),
		PromotedRequests:      int64(stats.promoted_requests),
		RetriedSteps:          int64(stats.retried_steps),
		StagedRequests:        int64(stats.staged_requests),
		StagedRecallBytes:     int64(stats.staged_recall_bytes),
		LoweredBudgets:        int64(stats.lowered_budgets),
		PrefixHits:            int64(stats.prefix_hits),
		PrefixHitTokens:       int64(stats.prefix_hit_tokens),
		HostBlocksCached:      int32(stats.host_blocks_cached),
	}, nil
}
