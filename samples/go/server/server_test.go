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
	"strings"
	"sync"
	"testing"
	"time"

	"pulseinfer"
)

var (
	engine  *pulseinfer.Engine
	baseURL string
)

// TestMain serves one engine over SmolLM2 on 127.0.0.1 (a free port) for every test.
func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	modelPath := os.Getenv("PULSEINFER_MODEL")
	if modelPath == "" {
		modelPath = "../../../.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"
	}
	model, err := pulseinfer.LoadModel(modelPath, nil)
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
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	baseURL = "http://" + listener.Addr().String()
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serve(ctx, listener, engine) }()
	code := m.Run()
	stop()
	if err := <-served; err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		return 1
	}
	return code
}

type event struct {
	name string
	data string
}

func post(ctx context.Context, body string) (*http.Response, error) {
	request, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	return http.DefaultClient.Do(request)
}

// readEvents parses a server-sent event stream, sending each event to events.
func readEvents(stream io.Reader, events chan<- event) error {
	defer close(events)
	scanner := bufio.NewScanner(stream)
	var current event
	for scanner.Scan() {
		line := scanner.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			current.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			current.data = strings.TrimPrefix(line, "data: ")
		case line == "":
			events <- current
			current = event{}
		}
	}
	return scanner.Err()
}

func TestConcurrentStreamsComplete(t *testing.T) {
	prompts := []string{"The capital of France is", "Once upon a time", "def fibonacci(n):", "Water boils at"}
	const maxTokens = 8
	var wait sync.WaitGroup
	for _, prompt := range prompts {
		wait.Add(1)
		go func(prompt string) {
			defer wait.Done()
			body := fmt.Sprintf(`{"prompt": %q, "max_tokens": %d, "temperature": 0, "ignore_eos": true}`, prompt, maxTokens)
			response, err := post(context.Background(), body)
			if err != nil {
				t.Error(err)
				return
			}
			defer response.Body.Close()
			if response.StatusCode != http.StatusOK || response.Header.Get("Content-Type") != "text/event-stream" {
				t.Errorf("%q: status %d, content type %q", prompt, response.StatusCode, response.Header.Get("Content-Type"))
				return
			}
			events := make(chan event)
			go readEvents(response.Body, events)
			var tokens []tokenEvent
			var done *doneEvent
			for e := range events {
				switch e.name {
				case "token":
					var token tokenEvent
					if err := json.Unmarshal([]byte(e.data), &token); err != nil {
						t.Errorf("%q: token event %q: %v", prompt, e.data, err)
					}
					tokens = append(tokens, token)
				case "done":
					done = &doneEvent{}
					if err := json.Unmarshal([]byte(e.data), done); err != nil {
						t.Errorf("%q: done event %q: %v", prompt, e.data, err)
					}
				default:
					t.Errorf("%q: unexpected event %+v", prompt, e)
				}
			}
			if len(tokens) != maxTokens || done == nil {
				t.Errorf("%q: %d token events, done event %+v; want %d and one", prompt, len(tokens), done, maxTokens)
				return
			}
			if done.GeneratedTokens != maxTokens || done.FinishReason != "max_tokens" || done.PromptTokens == 0 {
				t.Errorf("%q: done event %+v", prompt, done)
			}
		}(prompt)
	}
	wait.Wait()
}

func TestClientDisconnectCancels(t *testing.T) {
	before, err := engine.Stats()
	if err != nil {
		t.Fatal(err)
	}
	ctx, disconnect := context.WithCancel(context.Background())
	defer disconnect()
	const maxTokens = 500
	body := fmt.Sprintf(`{"prompt": "Once upon a time", "max_tokens": %d, "ignore_eos": true}`, maxTokens)
	response, err := post(ctx, body)
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan event)
	go readEvents(response.Body, events)
	if first := <-events; first.name != "token" {
		t.Fatalf("first event %+v", first)
	}
	disconnect()
	response.Body.Close()

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

// stream posts one greedy completion and returns its token ids and whether a done event ended
// it; with leaveAfter > 0 the client disconnects after that many tokens.
func stream(ctx context.Context, prompt string, maxTokens, leaveAfter int) ([]int32, bool, error) {
	ctx, disconnect := context.WithCancel(ctx)
	defer disconnect()
	body := fmt.Sprintf(`{"prompt": %q, "max_tokens": %d, "temperature": 0, "ignore_eos": true}`, prompt, maxTokens)
	response, err := post(ctx, body)
	if err != nil {
		return nil, false, err
	}
	defer response.Body.Close()
	events := make(chan event)
	go readEvents(response.Body, events)
	var ids []int32
	for e := range events {
		switch e.name {
		case "token":
			var token tokenEvent
			if err := json.Unmarshal([]byte(e.data), &token); err != nil {
				return ids, false, err
			}
			ids = append(ids, token.ID)
			if leaveAfter > 0 && len(ids) == leaveAfter {
				disconnect()
				for range events {
				}
				return ids, false, nil
			}
		case "done":
			for range events {
			}
			return ids, true, nil
		}
	}
	return ids, false, nil
}

// A bounded loopback load: 16 clients, 4 requests each over a few prompts, a third of them
// leaving mid-stream. Every stream that completes has the ids its prompt gives alone, every
// one that leaves has a prefix of them, and the engine drains: each disconnect cancelled its
// request.
func TestLoopbackLoadWithClientsThatLeave(t *testing.T) {
	prompts := []string{"The capital of France is", "Once upon a time", "def fibonacci(n):", "Water boils at"}
	const maxTokens = 6
	alone := map[string][]int32{}
	for _, prompt := range prompts {
		ids, done, err := stream(context.Background(), prompt, maxTokens, 0)
		if err != nil || !done || len(ids) != maxTokens {
			t.Fatalf("%q alone: %v, done %v, %v", prompt, ids, done, err)
		}
		alone[prompt] = ids
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
				ids, done, err := stream(context.Background(), prompt, maxTokens, leaveAfter)
				if err != nil {
					t.Errorf("client %d: %v", client, err)
					return
				}
				want := alone[prompt]
				if len(ids) > len(want) || fmt.Sprint(ids) != fmt.Sprint(want[:len(ids)]) ||
					(leaveAfter == 0 && (!done || len(ids) != maxTokens)) {
					t.Errorf("client %d, %q (leaving after %d): %v, done %v; alone %v", client, prompt, leaveAfter, ids, done, want)
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

func TestBadRequests(t *testing.T) {
	for _, test := range []struct {
		body, wantError string
	}{
		{`{"prompt": "x"`, "not a completion request"},
		{`{"max_tokens": 4}`, `no "prompt"`},
		{`{"prompt": "x", "temprature": 0}`, "unknown field"},
		{`{"prompt": "x", "top_p": 0}`, "top_p"}, // refused by the library
	} {
		response, err := post(context.Background(), test.body)
		if err != nil {
			t.Fatal(err)
		}
		var body errorEvent
		decodeErr := json.NewDecoder(response.Body).Decode(&body)
		response.Body.Close()
		if response.StatusCode != http.StatusBadRequest || decodeErr != nil ||
			!strings.Contains(body.Error, test.wantError) {
			t.Errorf("%s: status %d, error %q (%v); want 400 and an error about %q",
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
