package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"pulseinfer"
)

// completionHandler streams the completion of POST /v1/completions as server-sent events.
type completionHandler struct {
	engine *pulseinfer.Engine
}

type tokenEvent struct {
	ID   int32  `json:"id"`
	Text string `json:"text"`
}

type doneEvent struct {
	FinishReason    string  `json:"finish_reason"`
	PromptTokens    int32   `json:"prompt_tokens"`
	GeneratedTokens int32   `json:"generated_tokens"`
	QueueMS         float64 `json:"queue_ms"`
	TTFTMS          float64 `json:"ttft_ms"`
	TPOTMS          float64 `json:"tpot_ms"`
	TotalMS         float64 `json:"total_ms"`
}

type errorEvent struct {
	Error string `json:"error"`
}

func (h *completionHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, errors.New("use POST"))
		return
	}
	prompt, sampling, err := decodeCompletion(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	request, err := h.engine.GenerateText(r.Context(), prompt, pulseinfer.TokenizeDefault, &sampling)
	if err != nil {
		writeError(w, submitStatus(err), err)
		return
	}

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher, _ := w.(http.Flusher)
	// A failed write means the client is gone: its context then cancels the generation.
	for token := range request.Tokens() {
		writeEvent(w, "token", tokenEvent{ID: token.ID, Text: token.Text})
		if flusher != nil {
			flusher.Flush()
		}
	}
	result, err := request.Wait()
	switch {
	case r.Context().Err() != nil: // the client is gone
	case err != nil:
		writeEvent(w, "error", errorEvent{Error: err.Error()})
	default:
		stats := result.Stats
		writeEvent(w, "done", doneEvent{
			FinishReason:    stats.FinishReason.String(),
			PromptTokens:    stats.PromptTokens,
			GeneratedTokens: stats.GeneratedTokens,
			QueueMS:         milliseconds(stats.Queue),
			TTFTMS:          milliseconds(stats.TimeToFirst),
			TPOTMS:          milliseconds(stats.TimePerToken),
			TotalMS:         milliseconds(stats.Total),
		})
	}
}

// decodeCompletion reads the body: the prompt, and sampling fields over the library's defaults.
func decodeCompletion(body io.Reader) (string, pulseinfer.SamplingParams, error) {
	var prompt string
	sampling := pulseinfer.DefaultSamplingParams()
	// Each field points into the defaults, so the body changes only the fields it names.
	fields := struct {
		Prompt            *string   `json:"prompt"`
		MaxTokens         *int32    `json:"max_tokens"`
		Temperature       *float32  `json:"temperature"`
		TopK              *int32    `json:"top_k"`
		TopP              *float32  `json:"top_p"`
		MinP              *float32  `json:"min_p"`
		RepetitionPenalty *float32  `json:"repetition_penalty"`
		Seed              *uint64   `json:"seed"`
		IgnoreEOS         *bool     `json:"ignore_eos"`
		Stop              *[]string `json:"stop"`
		StopTokenIDs      *[]int32  `json:"stop_token_ids"`
	}{&prompt, &sampling.MaxTokens, &sampling.Temperature, &sampling.TopK, &sampling.TopP,
		&sampling.MinP, &sampling.RepetitionPenalty, &sampling.Seed, &sampling.IgnoreEOS,
		&sampling.StopStrings, &sampling.StopTokens}
	decoder := json.NewDecoder(body)
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&fields); err != nil {
		return "", sampling, fmt.Errorf("the body is not a completion request: %w", err)
	}
	if prompt == "" {
		return "", sampling, errors.New(`the body has no "prompt"`)
	}
	return prompt, sampling, nil
}

// submitStatus is the HTTP status for an error of Engine.GenerateText.
func submitStatus(err error) int {
	switch {
	case errors.Is(err, pulseinfer.ErrInvalidArgument), errors.Is(err, pulseinfer.ErrFailedPrecondition),
		errors.Is(err, pulseinfer.ErrOutOfMemory):
		return http.StatusBadRequest
	case errors.Is(err, pulseinfer.ErrNoCapacity), errors.Is(err, pulseinfer.ErrEngineClosed):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func writeEvent(w io.Writer, name string, data any) {
	encoded, _ := json.Marshal(data) // cannot fail: plain structs
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, encoded)
}

func writeError(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	encoded, _ := json.Marshal(errorEvent{Error: err.Error()})
	w.Write(append(encoded, '\n'))
}

func milliseconds(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
