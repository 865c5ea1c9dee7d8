package pulseinfer_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pulseinfer "github.com/libpulseinfer/libpulseinfer/bindings/go"
)

func TestModelInfo(t *testing.T) {
	info := model.Info()
	want := pulseinfer.ModelInfo{
		Architecture: "llama", Format: "gguf", StoredType: "Q4_1", WeightType: "quantized", Backend: "cpu",
		NumLayers: 30, NumHeads: 9, NumKVHeads: 3, HeadDim: 64, HiddenSize: 576, IntermediateSize: 1536,
		VocabSize: 49152, ContextLength: 8192, TieWordEmbeddings: true, ParameterCount: 134515008,
		Tokenizer: "gpt2", BOSToken: 1, EOSToken: 2, ChatTemplate: "chatml", TensorParallelSize: 1,
	}
	if info != want {
		t.Errorf("Info() = %+v\nwant %+v", info, want)
	}
}

func TestLoadErrors(t *testing.T) {
	_, err := pulseinfer.LoadModel("/no/such/model.gguf", nil)
	var libraryErr *pulseinfer.Error
	if !errors.Is(err, pulseinfer.ErrNotFound) || !errors.As(err, &libraryErr) ||
		!strings.Contains(libraryErr.Message, "pulse_model_load") || !strings.Contains(err.Error(), "/no/such/model.gguf") {
		t.Errorf("LoadModel(a missing file) = %v, want ErrNotFound naming the file", err)
	}

	params := pulseinfer.DefaultModelParams()
	params.Backend = "tpu"
	if _, err := pulseinfer.LoadModel("/no/such/model.gguf", &params); !errors.Is(err, pulseinfer.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "tpu") {
		t.Errorf("LoadModel(backend tpu) = %v, want ErrInvalidArgument naming the backend", err)
	}

	notAModel := filepath.Join(t.TempDir(), "model.gguf")
	if err := os.WriteFile(notAModel, []byte("not a model"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := pulseinfer.LoadModel(notAModel, nil); !errors.Is(err, pulseinfer.ErrInvalidModel) {
		t.Errorf("LoadModel(a text file) = %v, want ErrInvalidModel", err)
	}
}

// A two-layer Llama with random weights and no tokenizer, shared with the C, Python and Rust tests.
const tinyConfig = "../../tests/data/tiny-llama.json"

// loadTinyModel loads the tiny Llama with the weights of seed 7; the caller closes it.
func loadTinyModel(t *testing.T) *pulseinfer.Model {
	t.Helper()
	params := pulseinfer.DefaultModelParams()
	params.RandomWeights = true
	params.RandomSeed = 7
	params.Threads = 1
	tiny, err := pulseinfer.LoadModel(tinyConfig, &params)
	if err != nil {
		t.Fatal(err)
	}
	return tiny
}

func TestRandomWeights(t *testing.T) {
	tiny := loadTinyModel(t)
	defer tiny.Close()
	info := tiny.Info()
	if info.Format != "random" || info.VocabSize != 300 || info.ContextLength != 256 || info.Tokenizer != "" {
		t.Errorf("Info() = %+v", info)
	}
	if _, err := tiny.Tokenize("hello", pulseinfer.TokenizeDefault); !errors.Is(err, pulseinfer.ErrUnsupported) {
		t.Errorf("Tokenize without a tokenizer = %v, want ErrUnsupported", err)
	}

	tinyEngine, err := pulseinfer.NewEngine(tiny, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tinyEngine.Close()
	tiny.Close() // the engine keeps its own reference
	tiny.Close()
	sampling := greedy(6)
	sampling.IgnoreEOS = true
	request, err := tinyEngine.Generate(context.Background(), []int32{5, 6, 7}, sampling)
	if err != nil {
		t.Fatal(err)
	}
	s, err := readAll(request)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.tokens) != 6 || s.text() != "" || s.result.Text != "" || !equal(s.ids(), s.result.Tokens) {
		t.Errorf("streamed %+v, result %+v; want 6 tokens without text", s.tokens, s.result)
	}
}

func equal(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
