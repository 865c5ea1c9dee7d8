package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	pulseinfer "github.com/libpulseinfer/libpulseinfer/bindings/go"
)

// The request bodies of /v1/completions and /v1/chat/completions: OpenAI's fields that this
// server honours, plus the library's sampling extensions (top_k, min_p, repetition_penalty,
// ignore_eos, stop_token_ids). Other fields are ignored, as OpenAI-compatible servers do.
type samplingFields struct {
	Model             string          `json:"model"`
	MaxTokens         *int32          `json:"max_tokens"`
	MaxCompletion     *int32          `json:"max_completion_tokens"`
	Temperature       *float32        `json:"temperature"`
	TopP              *float32        `json:"top_p"`
	TopK              *int32          `json:"top_k"`
	MinP              *float32        `json:"min_p"`
	RepetitionPenalty *float32        `json:"repetition_penalty"`
	Seed              *uint64         `json:"seed"`
	N                 *int            `json:"n"`
	Stop              json.RawMessage `json:"stop"`
	StopTokenIDs      []int32         `json:"stop_token_ids"`
	IgnoreEOS         bool            `json:"ignore_eos"`
	Stream            bool            `json:"stream"`
}

type completionBody struct {
	samplingFields
	Prompt json.RawMessage `json:"prompt"`
}

type chatBody struct {
	samplingFields
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

// apiError is an OpenAI-style error: its status and the body {"error": {...}}.
type apiError struct {
	status  int
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) Error() string { return e.Message }

func invalid(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...),
		Type: "invalid_request_error", Param: &param}
}

func writeError(w http.ResponseWriter, err *apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(err.status)
	encoded, _ := json.Marshal(struct {
		Error *apiError `json:"error"`
	}{err})
	w.Write(append(encoded, '\n'))
}

// decodeBody reads a JSON body into v; a body that is not JSON of its shape is a 400.
func decodeBody(body io.Reader, v any) *apiError {
	if err := json.NewDecoder(body).Decode(v); err != nil {
		return invalid("", "the body is not a valid request: %v", err)
	}
	return nil
}

// samplingParams is the library's sampling for the fields, over its defaults; values the
// library refuses come back from the submit as a 400 naming them.
func (f *samplingFields) samplingParams() (pulseinfer.SamplingParams, *apiError) {
	sampling := pulseinfer.DefaultSamplingParams()
	if f.N != nil && *f.N != 1 {
		return sampling, invalid("n", "n must be 1, got %d", *f.N)
	}
	switch {
	case f.MaxCompletion != nil:
		sampling.MaxTokens = *f.MaxCompletion
	case f.MaxTokens != nil:
		sampling.MaxTokens = *f.MaxTokens
	}
	if sampling.MaxTokens < 1 {
		return sampling, invalid("max_tokens", "max_tokens must be at least 1, got %d",
			sampling.MaxTokens)
	}
	override(&sampling.Temperature, f.Temperature)
	override(&sampling.TopP, f.TopP)
	override(&sampling.TopK, f.TopK)
	override(&sampling.MinP, f.MinP)
	override(&sampling.RepetitionPenalty, f.RepetitionPenalty)
	override(&sampling.Seed, f.Seed)
	sampling.IgnoreEOS = f.IgnoreEOS
	sampling.StopTokens = f.StopTokenIDs
	stop, err := stringOrList(f.Stop)
	if err != nil {
		return sampling, invalid("stop", "stop must be a string or a list of strings")
	}
	sampling.StopStrings = stop
	return sampling, nil
}

// override sets *field to the request's value, when it gave one.
func override[T any](field *T, value *T) {
	if value != nil {
		*field = *value
	}
}

// stringOrList decodes OpenAI's "a string or a list of strings" (absent or null: none).
func stringOrList(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, err
	}
	return list, nil
}

// messageText is a chat message's content: a string, or a list of {"type": "text", "text": ...}
// parts (other part types are refused).
func messageText(raw json.RawMessage) (string, error) {
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		return text, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("a message's content must be a string or a list of text parts")
	}
	for _, part := range parts {
		if part.Type != "text" {
			return "", fmt.Errorf("content parts of type %q are not supported", part.Type)
		}
		text += part.Text
	}
	return text, nil
}

// finishReason is OpenAI's name for why a request finished.
func finishReason(reason pulseinfer.FinishReason) string {
	switch reason {
	case pulseinfer.FinishStopToken, pulseinfer.FinishStopString:
		return "stop"
	case pulseinfer.FinishMaxTokens, pulseinfer.FinishContext:
		return "length"
	}
	return reason.String()
}

// submitError is the API error for a failed Engine.GenerateText.
func submitError(err error) *apiError {
	switch {
	case errors.Is(err, pulseinfer.ErrInvalidArgument), errors.Is(err, pulseinfer.ErrFailedPrecondition),
		errors.Is(err, pulseinfer.ErrOutOfMemory), errors.Is(err, pulseinfer.ErrNotFound),
		errors.Is(err, pulseinfer.ErrUnsupported): // the last two: no chat template, no tokenizer
		return invalid("", "%v", err)
	case errors.Is(err, pulseinfer.ErrNoCapacity), errors.Is(err, pulseinfer.ErrEngineClosed):
		return &apiError{status: http.StatusServiceUnavailable, Message: err.Error(),
			Type: "server_error"}
	}
	return &apiError{status: http.StatusInternalServerError, Message: err.Error(),
		Type: "server_error"}
}
