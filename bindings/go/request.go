package pulseinfer

// #include <pulseinfer/pulseinfer.h>
import "C"

import (
	"context"
	"runtime/cgo"
	"time"
)

// Token is one generated token and the text it adds to the request's text. The text holds only
// whole UTF-8 characters, so it may be empty: half a character, a control token, or text that
// may begin a stop string waits for a later token.
type Token struct {
	ID   int32
	Text string
}

// FinishReason says why a request finished.
type FinishReason int32

const (
	FinishNone       FinishReason = C.PULSE_FINISH_NONE
	FinishMaxTokens  FinishReason = C.PULSE_FINISH_MAX_TOKENS
	FinishStopToken  FinishReason = C.PULSE_FINISH_STOP_TOKEN // the stop token is in the output
	FinishContext    FinishReason = C.PULSE_FINISH_CONTEXT    // reached the engine's MaxContext
	FinishCancelled  FinishReason = C.PULSE_FINISH_CANCELLED
	FinishCapacity   FinishReason = C.PULSE_FINISH_CAPACITY // can never fit the KV cache
	FinishError      FinishReason = C.PULSE_FINISH_ERROR
	FinishStopString FinishReason = C.PULSE_FINISH_STOP_STRING // the stop string is not in the text
)

// String returns the library's name of the reason, such as "max_tokens".
func (r FinishReason) String() string {
	return C.GoString(C.pulse_finish_reason_string(C.pulse_finish_reason(r)))
}

// RequestStats describe a finished request (pulse_request_stats).
type RequestStats struct {
	FinishReason    FinishReason
	PromptTokens    int32
	GeneratedTokens int32
	Queue           time.Duration // submit to the first scheduled step
	TimeToFirst     time.Duration // submit to the first generated token
	TimePerToken    time.Duration // mean time between generated tokens after the first
	Total           time.Duration // submit to finish
}

func requestStatsFromC(stats *C.pulse_request_stats) RequestStats {
	return RequestStats{
		FinishReason:    FinishReason(stats.finish_reason),
		PromptTokens:    int32(stats.prompt_tokens),
		GeneratedTokens: int32(stats.generated_tokens),
		Queue:           milliseconds(stats.queue_ms),
		TimeToFirst:     milliseconds(stats.ttft_ms),
		TimePerToken:    milliseconds(stats.tpot_ms),
		Total:           milliseconds(stats.total_ms),
	}
}

// Result is what a finished request generated.
type Result struct {
	Tokens []int32
	Text   string // the concatenated Token texts; "" when the model has no tokenizer
	Stats  RequestStats
}

// Request is a generation queued on an Engine. Its tokens arrive on Tokens as they are
// generated; Wait returns when it has finished. The library's request is released then.
type Request struct {
	id     uint64
	ctx    context.Context
	tokens chan Token
	done   chan struct{}
	handle cgo.Handle // names the request to goTokenEvent until it finishes
	result Result
	err    error
	// engine keeps the Engine, and so its C engine, alive while the request is in use.
	engine *Engine
}

// ID is the library's request id, unique within its engine.
func (r *Request) ID() uint64 { return r.id }

// Tokens delivers each generated token and is closed when the request finishes. It holds every
// token the request can generate, so a caller that only wants the Result need not read it.
func (r *Request) Tokens() <-chan Token { return r.tokens }

// Wait waits for the request to finish and returns its result. The error is the context's when
// its context ended first (the result then has the tokens generated until then), or an *Error
// when the request failed or its engine was closed.
func (r *Request) Wait() (Result, error) {
	<-r.done
	return r.result, r.err
}

func (r *Request) finish(result Result, err error) {
	r.result, r.err = result, err
	r.handle.Delete()
	close(r.tokens)
	close(r.done)
}
