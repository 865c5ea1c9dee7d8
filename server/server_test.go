package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	pulseinfer "github.com/libpulseinfer/libpulseinfer/bindings/go"
)

var (
	engine  *pulseinfer.Engine
	baseURL string
)

// TestMain serves one engine over SmolLM2 on 127.0.0.1 (a free port) for every test.
func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

// modelPath is SmolLM2's GGUF, or $PULSEINFER_MODEL.
func modelPath() string {
	if path := os.Getenv("PULSEINFER_MODEL"); path != "" {
		return path
	}
	return "../.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"
}

func runTests(m *testing.M) int {
	model, err := pulseinfer.LoadModel(modelPath(), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer model.Close()
	engine, err = pulseinfer.NewEngine(model, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer engine.Close()
	url, stop, err := start(newServer(engine, "smollm2", 64))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	baseURL = url
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		return 1
	}
	return code
}

// start serves s on a free loopback port; stop shuts it down.
func start(s *server) (string, func() error, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serve(ctx, listener, s) }()
	return "http://" + listener.Addr().String(), func() error { cancel(); return <-served }, nil
}

func post(ctx context.Context, url, path, body string) (*http.Response, error) {
	request, err := http.NewRequestWithContext(ctx, http.MethodPost, url+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	return http.DefaultClient.Do(request)
}

// chunk is the part of a streamed chunk or a whole response the tests read.
type chunk struct {
	Object  string `json:"object"`
	Choices []struct {
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
		Delta        struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"delta"`
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int32 `json:"prompt_tokens"`
		CompletionTokens int32 `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
}

// readStream parses server-sent events into chunks, each sent on chunks; done says whether
// the stream ended with [DONE].
func readStream(stream io.Reader, chunks chan<- chunk) (done bool, err error) {
	defer close(chunks)
	scanner := bufio.NewScanner(stream)
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		data := strings.TrimPrefix(line, "data: ")
		if data == "[DONE]" {
			return true, nil
		}
		var c chunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return false, fmt.Errorf("chunk %q: %w", data, err)
		}
		chunks <- c
	}
	return false, scanner.Err()
}

// stream posts one greedy streamed completion and returns its text, its finish reason and
// whether [DONE] ended it; with leaveAfter > 0 the client disconnects after that many chunks.
func stream(ctx context.Context, prompt string, maxTokens, leaveAfter int) (string, string, bool, error) {
	ctx, disconnect := context.WithCancel(ctx)
	defer disconnect()
	body := fmt.Sprintf(`{"prompt": %q, "max_tokens": %d, "temperature": 0, "ignore_eos": true, "stream": true}`,
		prompt, maxTokens)
	response, err := post(ctx, baseURL, "/v1/completions", body)
	if err != nil {
		return "", "", false, err
	}
	defer response.Body.Close()
	if response.StatusCode != http.StatusOK || response.Header.Get("Content-Type") != "text/event-stream" {
		return "", "", false, fmt.Errorf("status %d, content type %q", response.StatusCode,
			response.Header.Get("Content-Type"))
	}
	chunks := make(chan chunk)
	ended := make(chan bool, 1)
	go func() { done, _ := readStream(response.Body, chunks); ended <- done }()
	var text strings.Builder
	reason := ""
	pieces := 0
	for c := range chunks {
		if len(c.Choices) != 1 || c.Object != "text_completion" {
			return text.String(), reason, false, fmt.Errorf("chunk %+v", c)
		}
		text.WriteString(c.Choices[0].Text)
		if c.Choices[0].FinishReason != nil {
			reason = *c.Choices[0].FinishReason
		}
		if pieces++; leaveAfter > 0 && pieces == leaveAfter {
			disconnect()
			for range chunks {
			}
			return text.String(), reason, false, nil
		}
	}
	return text.String(), reason, <-ended, nil
}

func TestStreamedAndWholeCompletionsAgree(t *testing.T) {
	prompts := []string{"The capital of France is", "Once upon a time", "def fibonacci(n):", "Water boils at"}
	var wait sync.WaitGroup
	for _, prompt := range prompts {
		wait.Add(1)
		go func(prompt string) {
			defer wait.Done()
			streamed, reason, done, err := stream(context.Background(), prompt, 8, 0)
			if err != nil || !done || reason != "length" || streamed == "" {
				t.Errorf("%q streamed: %q, %q, done %v, %v", prompt, streamed, reason, done, err)
				return
			}
			body := fmt.Sprintf(`{"model": "any", "prompt": %q, "max_tokens": 8, "temperature": 0, "ignore_eos": true}`, prompt)
			response, err := post(context.Background(), baseURL, "/v1/completions", body)
			if err != nil {
				t.Error(err)
				return
			}
			defer response.Body.Close()
			var whole chunk
			if err := json.NewDecoder(response.Body).Decode(&whole); err != nil || len(whole.Choices) != 1 {
				t.Errorf("%q whole: %+v, %v", prompt, whole, err)
				return
			}
			choice := whole.Choices[0]
			if choice.Text != streamed || choice.FinishReason == nil || *choice.FinishReason != "length" ||
				whole.Usage.CompletionTokens != 8 || whole.Usage.PromptTokens == 0 {
				t.Errorf("%q whole %+v; streamed %q", prompt, whole, streamed)
			}
		}(prompt)
	}
	wait.Wait()
}

// postWhole posts a request that is not streamed and returns its one-choice answer.
func postWhole(t *testing.T, url, path, body string) chunk {
	t.Helper()
	response, err := post(context.Background(), url, path, body)
	if err != nil {
		t.Fatal(err)
	}
	var whole chunk
	err = json.NewDecoder(response.Body).Decode(&whole)
	response.Body.Close()
	if err != nil || response.StatusCode != http.StatusOK || len(whole.Choices) != 1 {
		t.Fatalf("status %d: %+v, %v", response.StatusCode, whole, err)
	}
	return whole
}

// getText returns the body of a GET that answers 200.
func getText(t *testing.T, url string) string {
	t.Helper()
	response, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer response.Body.Close()
	body, _ := io.ReadAll(response.Body)
	if response.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %d", url, response.StatusCode)
	}
	return string(body)
}

func TestChatAppliesTheTemplate(t *testing.T) {
	const body = `{"messages": [{"role": "user", "content": "What is the capital of France?"}],
		"max_tokens": 24, "temperature": 0, "seed": 3, "unknown_field": {"ignored": true}}`
	whole := postWhole(t, baseURL, "/v1/chat/completions", body)
	message := whole.Choices[0].Message
	if whole.Object != "chat.completion" || message.Role != "assistant" ||
		!strings.Contains(message.Content, "Paris") {
		t.Errorf("chat: %+v", whole)
	}

	streamed, err := post(context.Background(), baseURL, "/v1/chat/completions",
		strings.Replace(body, `"seed": 3`, `"seed": 3, "stream": true`, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer streamed.Body.Close()
	chunks := make(chan chunk)
	ended := make(chan bool, 1)
	go func() { done, _ := readStream(streamed.Body, chunks); ended <- done }()
	var text strings.Builder
	first := true
	for c := range chunks {
		if c.Object != "chat.completion.chunk" || len(c.Choices) != 1 {
			t.Fatalf("chunk %+v", c)
		}
		if first && c.Choices[0].Delta.Role != "assistant" {
			t.Errorf("the first chunk's delta has no role: %+v", c)
		}
		first = false
		text.WriteString(c.Choices[0].Delta.Content)
	}
	if !<-ended || text.String() != message.Content {
		t.Errorf("streamed chat %q, whole %q", text.String(), message.Content)
	}
}

func TestClientDisconnectCancels(t *testing.T) {
	before, err := engine.Stats()
	if err != nil {
		t.Fatal(err)
	}
	const maxTokens = 500
	if _, _, done, err := stream(context.Background(), "Once upon a time", maxTokens, 1); err != nil || done {
		t.Fatalf("done %v, %v", done, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		stats, err := engine.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if stats.FinishedRequests > before.FinishedRequests && stats.Running == 0 && stats.Queued == 0 {
			if generated := stats.GeneratedTokens - before.GeneratedTokens; generated >= maxTokens {
				t.Errorf("the request ran on to %d tokens after its client left", generated)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the request is still running 10 s after its client left: %+v", stats)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A bounded loopback load: 16 clients, 4 requests each over a few prompts, a third of them
// leaving mid-stream. Every stream that completes has the text its prompt gives alone, every
// one that leaves a prefix of it, and the engine drains: each disconnect cancelled its request.
func TestLoopbackLoadWithClientsThatLeave(t *testing.T) {
	prompts := []string{"The capital of France is", "Once upon a time", "def fibonacci(n):", "Water boils at"}
	const maxTokens = 6
	alone := map[string]string{}
	for _, prompt := range prompts {
		text, _, done, err := stream(context.Background(), prompt, maxTokens, 0)
		if err != nil || !done {
			t.Fatalf("%q alone: %q, done %v, %v", prompt, text, done, err)
		}
		alone[prompt] = text
	}
	var wait sync.WaitGroup
	for client := 0; client < 16; client++ {
		wait.Add(1)
		go func(client int) {
			defer wait.Done()
			for i := 0; i < 4; i++ {
				prompt := prompts[(client+i)%len(prompts)]
				leaveAfter := 0
				if (client+i)%3 == 0 {
					leaveAfter = 1 + (client+i)%(maxTokens-1)
				}
				text, _, done, err := stream(context.Background(), prompt, maxTokens, leaveAfter)
				if err != nil {
					t.Errorf("client %d: %v", client, err)
					return
				}
				want := alone[prompt]
				if !strings.HasPrefix(want, text) || (leaveAfter == 0 && (!done || text != want)) {
					t.Errorf("client %d, %q (leaving after %d): %q, done %v; alone %q", client, prompt,
						leaveAfter, text, done, want)
				}
			}
		}(client)
	}
	wait.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		stats, err := engine.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if stats.Running == 0 && stats.Queued == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("requests still pending 10 s after every client left: %+v", stats)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestBadRequestsGetOpenAIErrors(t *testing.T) {
	for _, test := range []struct {
		path, body, wantError string
	}{
		{"/v1/completions", `{"prompt": "x"`, "not a valid request"},
		{"/v1/completions", `{"max_tokens": 4}`, "prompt"},
		{"/v1/completions", `{"prompt": ["a", "b"]}`, "one non-empty string"},
		{"/v1/completions", `{"prompt": "x", "n": 2}`, "n must be 1"},
		{"/v1/completions", `{"prompt": "x", "max_tokens": 0}`, "max_tokens"},
		{"/v1/completions", `{"prompt": "x", "stop": 7}`, "stop"},
		{"/v1/completions", `{"prompt": "x", "top_p": 0}`, "top_p"}, // refused by the library
		{"/v1/chat/completions", `{"messages": []}`, "messages"},
		{"/v1/chat/completions", `{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}`, "image_url"},
	} {
		response, err := post(context.Background(), baseURL, test.path, test.body)
		if err != nil {
			t.Fatal(err)
		}
		var body chunk
		decodeErr := json.NewDecoder(response.Body).Decode(&body)
		response.Body.Close()
		if response.StatusCode != http.StatusBadRequest || decodeErr != nil || body.Error == nil ||
			body.Error.Type != "invalid_request_error" || !strings.Contains(body.Error.Message, test.wantError) {
			t.Errorf("%s %s: status %d, %+v (%v); want 400 and an error about %q", test.path,
				test.body, response.StatusCode, body.Error, decodeErr, test.wantError)
		}
	}
	response, err := http.Get(baseURL + "/v1/completions")
	if err != nil {
		t.Fatal(err)
	}
	response.Body.Close()
	if response.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: status %d, want 405", response.StatusCode)
	}
}

func TestModelsHealthAndMetrics(t *testing.T) {
	get := func(path string) string { return getText(t, baseURL+path) }
	if models := get("/v1/models"); !strings.Contains(models, `"id":"smollm2"`) {
		t.Errorf("/v1/models: %s", models)
	}
	if health := get("/health"); !strings.Contains(health, `"ok"`) {
		t.Errorf("/health: %s", health)
	}
	if _, _, _, err := stream(context.Background(), "Hello", 4, 0); err != nil {
		t.Fatal(err)
	}
	metrics := get("/metrics")
	for _, series := range []string{"pulseinfer_requests_running 0", "pulseinfer_requests_waiting 0",
		"pulseinfer_requests_offloaded 0", "pulseinfer_generated_tokens_total",
		"pulseinfer_recall_bytes_total 0", "pulseinfer_slot_hit_ratio",
		"pulseinfer_prefix_cache_hits_total 0", "pulseinfer_host_blocks_cached 0",
		`pulseinfer_time_to_first_token_seconds_bucket{le="+Inf"}`,
		"pulseinfer_time_per_output_token_seconds_count"} {
		if !strings.Contains(metrics, series) {
			t.Errorf("/metrics has no %q:\n%s", series, metrics)
		}
	}
}

// Past --max-concurrent requests in progress the answer is 429; once one ends, requests run.
func TestRequestsPastTheBoundAreRefused(t *testing.T) {
	url, stop, err := start(newServer(engine, "smollm2", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long, err := post(ctx, url, "/v1/completions",
		`{"prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": true, "stream": true}`)
	if err != nil {
		t.Fatal(err)
	}
	first := bufio.NewReader(long.Body)
	if _, err := first.ReadString('\n'); err != nil { // the first chunk: it is running
		t.Fatal(err)
	}
	refused, err := post(context.Background(), url, "/v1/completions", `{"prompt": "x", "max_tokens": 1}`)
	if err != nil {
		t.Fatal(err)
	}
	var body chunk
	json.NewDecoder(refused.Body).Decode(&body)
	refused.Body.Close()
	if refused.StatusCode != http.StatusTooManyRequests || body.Error == nil {
		t.Errorf("status %d, %+v; want 429", refused.StatusCode, body.Error)
	}
	cancel()
	long.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		response, err := post(context.Background(), url, "/v1/completions", `{"prompt": "x", "max_tokens": 1}`)
		if err != nil {
			t.Fatal(err)
		}
		response.Body.Close()
		if response.StatusCode == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d 10 s after the request in progress left", response.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// With --prefix-cache, chats that share a long system prompt share its blocks in the host tier:
// the second skips their prefill (the metrics count the hit) and answers as a server without the
// cache does (the default budget covers these contexts, so attention is the dense one).
func TestChatsSharingASystemPromptShareItsBlocks(t *testing.T) {
	model, err := pulseinfer.LoadModel(modelPath(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	system := strings.Repeat("You answer questions about the French capital, briefly. ", 12)
	answers := map[bool][]string{}
	for _, cache := range []bool{false, true} {
		params := pulseinfer.DefaultEngineParams()
		params.OffloadMode = pulseinfer.OffloadSoloHead
		params.OffloadAdmission = pulseinfer.AdmissionOffloadEvery
		params.OffloadPrefixCache = cache
		e, err := pulseinfer.NewEngine(model, &params)
		if err != nil {
			t.Fatal(err)
		}
		url, stop, err := start(newServer(e, "smollm2", 4))
		if err != nil {
			t.Fatal(err)
		}
		for _, question := range []string{"What is the capital of France?", "Name a river in Paris."} {
			body := fmt.Sprintf(`{"messages": [{"role": "system", "content": %q}, `+
				`{"role": "user", "content": %q}], "max_tokens": 8, "temperature": 0}`, system, question)
			whole := postWhole(t, url, "/v1/chat/completions", body)
			answers[cache] = append(answers[cache], whole.Choices[0].Message.Content)
		}
		metrics := getText(t, url+"/metrics")
		want := "pulseinfer_prefix_cache_hits_total 0"
		if cache {
			want = "pulseinfer_prefix_cache_hits_total 1"
		}
		if !strings.Contains(metrics, want) {
			t.Errorf("cache %v: /metrics has no %q:\n%s", cache, want, metrics)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		e.Close()
	}
	if !reflect.DeepEqual(answers[true], answers[false]) {
		t.Errorf("with the cache %q, without %q", answers[true], answers[false])
	}
}
