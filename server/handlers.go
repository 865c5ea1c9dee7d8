package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	pulseinfer "github.com/libpulseinfer/libpulseinfer/bindings/go"
)

// server answers the OpenAI-compatible routes from one engine, whose batch every request shares.
type server struct {
	engine   *pulseinfer.Engine
	name     string        // the model's id in responses and /v1/models
	slots    chan struct{} // a token a request in progress; full: 429
	started  time.Time
	requests atomic.Uint64 // numbers the response ids
	metrics  *metrics
}

func newServer(engine *pulseinfer.Engine, name string, maxConcurrent int) *server {
	return &server{engine: engine, name: name,
		slots: make(chan struct{}, maxConcurrent), started: time.Now(), metrics: newMetrics()}
}

func (s *server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/completions", s.post(s.completion))
	mux.HandleFunc("/v1/chat/completions", s.post(s.chat))
	mux.HandleFunc("/v1/models", s.get(s.models))
	mux.HandleFunc("/health", s.get(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]string{"status": "ok"})
	}))
	mux.HandleFunc("/metrics", s.get(s.metrics.serve(s.engine)))
	return mux
}

// allowed answers 405 unless r uses method.
func allowed(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method == method {
		return true
	}
	w.Header().Set("Allow", method)
	writeError(w, &apiError{status: http.StatusMethodNotAllowed, Message: "use " + method,
		Type: "invalid_request_error"})
	return false
}

func (s *server) get(handler http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if allowed(w, r, http.MethodGet) {
			handler(w, r)
		}
	}
}

// post admits a generation while fewer than the bound are in progress (else 429).
func (s *server) post(handler http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !allowed(w, r, http.MethodPost) {
			return
		}
		select {
		case s.slots <- struct{}{}:
			defer func() { <-s.slots }()
		default:
			s.metrics.rejected.Add(1)
			writeError(w, &apiError{status: http.StatusTooManyRequests, Type: "rate_limit_error",
				Message: fmt.Sprintf("%d requests are in progress, the server's bound", cap(s.slots))})
			return
		}
		handler(w, r)
	}
}

func (s *server) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, map[string]any{"object": "list", "data": []map[string]any{{
		"id": s.name, "object": "model", "created": s.started.Unix(), "owned_by": "pulseinfer"}}})
}

func (s *server) completion(w http.ResponseWriter, r *http.Request) {
	var body completionBody
	if err := decodeBody(r.Body, &body); err != nil {
		writeError(w, err)
		return
	}
	prompt, err := stringOrList(body.Prompt)
	if err != nil || len(prompt) != 1 || prompt[0] == "" {
		writeError(w, invalid("prompt", "prompt must be one non-empty string"))
		return
	}
	s.generate(w, r, &body.samplingFields, false,
		func(sampling *pulseinfer.SamplingParams) (*pulseinfer.Request, error) {
			return s.engine.GenerateText(r.Context(), prompt[0], pulseinfer.TokenizeDefault, sampling)
		})
}

func (s *server) chat(w http.ResponseWriter, r *http.Request) {
	var body chatBody
	if err := decodeBody(r.Body, &body); err != nil {
		writeError(w, err)
		return
	}
	if len(body.Messages) == 0 {
		writeError(w, invalid("messages", "messages must hold at least one message"))
		return
	}
	messages := make([]pulseinfer.ChatMessage, 0, len(body.Messages))
	for i, message := range body.Messages {
		text, err := messageText(message.Content)
		if err != nil {
			writeError(w, invalid(fmt.Sprintf("messages[%d].content", i), "%v", err))
			return
		}
		messages = append(messages, pulseinfer.ChatMessage{Role: message.Role, Content: text})
	}
	s.generate(w, r, &body.samplingFields, true,
		func(sampling *pulseinfer.SamplingParams) (*pulseinfer.Request, error) {
			return s.engine.GenerateChat(r.Context(), messages, sampling)
		})
}

// generate runs one request, which submit queues with r's context, and answers with its result,
// or streams it as server-sent events in OpenAI's chunk format. A client that disconnects
// cancels its request (its context).
func (s *server) generate(w http.ResponseWriter, r *http.Request, fields *samplingFields,
	chat bool, submit func(*pulseinfer.SamplingParams) (*pulseinfer.Request, error)) {
	sampling, apiErr := fields.samplingParams()
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	request, err := submit(&sampling)
	if err != nil {
		writeError(w, submitError(err))
		return
	}
	s.metrics.requests.Add(1)
	response := newResponse(s, chat)
	if !fields.Stream {
		result, err := request.Wait()
		if err != nil {
			if r.Context().Err() == nil {
				writeError(w, submitError(err))
			}
			return
		}
		s.metrics.observe(result.Stats)
		writeJSON(w, response.whole(result.Text, result.Stats))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher, _ := w.(http.Flusher)
	send := func(chunk any) {
		encoded, _ := json.Marshal(chunk)
		fmt.Fprintf(w, "data: %s\n\n", encoded)
		if flusher != nil {
			flusher.Flush()
		}
	}
	if chat {
		send(response.chunk(map[string]string{"role": "assistant", "content": ""}, nil))
	}
	// A failed write means the client is gone: its context then cancels the generation.
	for token := range request.Tokens() {
		if token.Text == "" {
			continue
		}
		send(response.chunk(response.piece(token.Text), nil))
	}
	result, err := request.Wait()
	switch {
	case r.Context().Err() != nil: // the client is gone
	case err != nil:
		send(map[string]*apiError{"error": submitError(err)})
	default:
		s.metrics.observe(result.Stats)
		reason := finishReason(result.Stats.FinishReason)
		send(response.chunk(response.piece(""), &reason))
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
}

// response names one generation's answer: its id, kind and creation time.
type response struct {
	id      string
	object  string
	created int64
	model   string
	chat    bool
}

func newResponse(s *server, chat bool) *response {
	prefix, object := "cmpl", "text_completion"
	if chat {
		prefix, object = "chatcmpl", "chat.completion"
	}
	return &response{id: fmt.Sprintf("%s-%d", prefix, s.requests.Add(1)), object: object,
		created: time.Now().Unix(), model: s.name, chat: chat}
}

func (r *response) whole(text string, stats pulseinfer.RequestStats) map[string]any {
	choice := map[string]any{"index": 0, "finish_reason": finishReason(stats.FinishReason)}
	if r.chat {
		choice["message"] = map[string]string{"role": "assistant", "content": text}
	} else {
		choice["text"] = text
		choice["logprobs"] = nil
	}
	return map[string]any{"id": r.id, "object": r.object, "created": r.created, "model": r.model,
		"choices": []any{choice},
		"usage": map[string]int32{"prompt_tokens": stats.PromptTokens,
			"completion_tokens": stats.GeneratedTokens,
			"total_tokens":      stats.PromptTokens + stats.GeneratedTokens}}
}

// piece is a chunk's content: a chat delta (none for "": the last chunk's) or completion text.
func (r *response) piece(text string) any {
	switch {
	case !r.chat:
		return text
	case text == "":
		return map[string]string{}
	}
	return map[string]string{"content": text}
}

// chunk is one streamed piece: a chat delta or completion text, and the finish reason once.
func (r *response) chunk(piece any, reason *string) map[string]any {
	choice := map[string]any{"index": 0, "finish_reason": reason}
	object := r.object
	if r.chat {
		choice["delta"] = piece
		object = "chat.completion.chunk"
	} else {
		choice["text"] = piece
		choice["logprobs"] = nil
	}
	return map[string]any{"id": r.id, "object": object, "created": r.created, "model": r.model,
		"choices": []any{choice}}
}

func writeJSON(w http.ResponseWriter, value any) {
	w.Header().Set("Content-Type", "application/json")
	encoded, _ := json.Marshal(value)
	w.Write(append(encoded, '\n'))
}
