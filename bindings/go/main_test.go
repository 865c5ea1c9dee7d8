package pulseinfer_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	pulseinfer "github.com/libpulseinfer/libpulseinfer/bindings/go"
)

// The trained model (SmolLM2-135M-Instruct) and one engine over it, shared by the tests.
var (
	model  *pulseinfer.Model
	engine *pulseinfer.Engine
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	var err error
	if model, err = pulseinfer.LoadModel(modelPath(), nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer model.Close()
	if engine, err = pulseinfer.NewEngine(model, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer engine.Close()
	return m.Run()
}

// modelPath is $PULSEINFER_MODEL, or SmolLM2 as scripts/setup fetches it.
func modelPath() string {
	if path := os.Getenv("PULSEINFER_MODEL"); path != "" {
		return path
	}
	return "../../.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"
}

func greedy(maxTokens int32) *pulseinfer.SamplingParams {
	sampling := pulseinfer.DefaultSamplingParams()
	sampling.Temperature = 0
	sampling.MaxTokens = maxTokens
	return &sampling
}

// streamed is a request's tokens as they arrived, and its result.
type streamed struct {
	tokens []pulseinfer.Token
	result pulseinfer.Result
}

func (s streamed) ids() []int32 {
	ids := make([]int32, len(s.tokens))
	for i, token := range s.tokens {
		ids[i] = token.ID
	}
	return ids
}

func (s streamed) text() string {
	text := ""
	for _, token := range s.tokens {
		text += token.Text
	}
	return text
}

// readAll reads every token of request, then waits for it.
func readAll(request *pulseinfer.Request) (streamed, error) {
	var s streamed
	for token := range request.Tokens() {
		s.tokens = append(s.tokens, token)
	}
	var err error
	s.result, err = request.Wait()
	return s, err
}

func generateText(t *testing.T, prompt string, sampling *pulseinfer.SamplingParams) streamed {
	t.Helper()
	request, err := engine.GenerateText(context.Background(), prompt, pulseinfer.TokenizeDefault, sampling)
	if err != nil {
		t.Fatal(err)
	}
	s, err := readAll(request)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
