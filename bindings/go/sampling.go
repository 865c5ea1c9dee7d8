package pulseinfer

// #include <pulseinfer/pulseinfer.h>
import "C"

// SamplingParams are the options of a generation. DefaultSamplingParams has the library's
// defaults. Temperature 0 is greedy (argmax, lowest id on ties); otherwise repetition penalty,
// temperature, top-k, top-p and min-p filter in that order and a token is drawn with a
// generator seeded by Seed (same seed, same tokens).
type SamplingParams struct {
	Temperature       float32 // >= 0
	TopK              int32   // >= 0; 0 is off
	TopP              float32 // in (0, 1]; 1 is off
	MinP              float32 // in [0, 1]; 0 is off
	RepetitionPenalty float32 // > 0; 1 is off; applies to prompt and generated tokens
	MaxTokens         int32   // tokens to generate, >= 1
	Seed              uint64
	// IgnoreEOS keeps generating past the model's end-of-sequence tokens.
	IgnoreEOS bool
	// StopTokens end the generation too; the sampled one is part of the output.
	StopTokens []int32
	// StopStrings end the generation as soon as its text contains one; the text ends just before
	// it and no part of it reaches a Token. They need the model's tokenizer.
	StopStrings []string
	// Offload is the request's own offloading within its engine's (the zero value: as the
	// engine). The sizes override the engine's when not nil.
	Offload             RequestOffload
	OffloadBudgetTokens *int32
	OffloadSinkTokens   *int32
	OffloadWindowTokens *int32
}

// RequestOffload is how one request attends, within what its engine offloads
// (pulse_sampling_params.offload_mode).
type RequestOffload int32

const (
	// RequestOffloadEngine: as the engine (offloaded when its EngineParams.OffloadMode is).
	RequestOffloadEngine RequestOffload = iota
	// RequestOffloadDense: dense attention; the request's whole context stays in the KV cache.
	RequestOffloadDense
	// RequestOffloadSoloHead and RequestOffloadHeadWise must be the engine's own mode.
	RequestOffloadSoloHead
	RequestOffloadHeadWise
)

func (o RequestOffload) code() C.int32_t {
	switch o {
	case RequestOffloadEngine:
		return C.PULSE_OFFLOAD_ENGINE
	case RequestOffloadDense:
		return C.PULSE_OFFLOAD_OFF
	case RequestOffloadSoloHead:
		return C.PULSE_OFFLOAD_SOLOHEAD
	case RequestOffloadHeadWise:
		return C.PULSE_OFFLOAD_HEADWISE
	}
	return C.int32_t(100 + o) // no mode: the library refuses it, naming the field
}

// DefaultSamplingParams returns the library's defaults (pulse_sampling_params_init).
func DefaultSamplingParams() SamplingParams {
	var params C.pulse_sampling_params
	C.pulse_sampling_params_init(&params, C.sizeof_pulse_sampling_params) // cannot fail: the header's own size
	return SamplingParams{
		Temperature:       float32(params.temperature),
		TopK:              int32(params.top_k),
		TopP:              float32(params.top_p),
		MinP:              float32(params.min_p),
		RepetitionPenalty: float32(params.repetition_penalty),
		MaxTokens:         int32(params.max_tokens),
		Seed:              uint64(params.seed),
		IgnoreEOS:         params.ignore_eos != 0,
	}
}

// toC fills the C struct, its arrays allocated in memory.
func (p *SamplingParams) toC(memory *cMemory) C.pulse_sampling_params {
	var params C.pulse_sampling_params
	C.pulse_sampling_params_init(&params, C.sizeof_pulse_sampling_params)
	params.temperature = C.float(p.Temperature)
	params.top_k = C.int32_t(p.TopK)
	params.top_p = C.float(p.TopP)
	params.min_p = C.float(p.MinP)
	params.repetition_penalty = C.float(p.RepetitionPenalty)
	params.max_tokens = C.int32_t(p.MaxTokens)
	params.seed = C.uint64_t(p.Seed)
	params.ignore_eos = C.int32_t(boolInt(p.IgnoreEOS))
	params.stop_token_ids = memory.tokens(p.StopTokens)
	params.stop_token_count = C.size_t(len(p.StopTokens))
	params.stop_strings = memory.strings(p.StopStrings)
	params.stop_string_count = C.size_t(len(p.StopStrings))
	params.offload_mode = p.Offload.code()
	if p.OffloadBudgetTokens != nil {
		params.offload_budget_tokens = C.int32_t(*p.OffloadBudgetTokens)
	}
	if p.OffloadSinkTokens != nil {
		params.offload_sink_tokens = C.int32_t(*p.OffloadSinkTokens)
	}
	if p.OffloadWindowTokens != nil {
		params.offload_window_tokens = C.int32_t(*p.OffloadWindowTokens)
	}
	return params
}
