package pulseinfer_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pulseinfer"
)

func TestModelInfo(t *testing.T) {
	info := model.Info()
	want := pulseinfer.ModelInfo{
		Architecture: "llama", Format: "gguf", StoredType: "Q4_1", WeightType: "f32", Backend: "cpu",
		NumLayers: 30, NumHeads: 9, NumKVHeads: 3, HeadDim: 64, HiddenSize: 576, IntermediateSize: 1536,
		VocabSize: 49152, ContextLength: 8192, TieWordEmbeddings: true, ParameterCount: 134515008,
		Tokenizer: "gpt2", BOSToken: 1, EOSToken: 2, ChatTemplate: "chatml",
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

// A two-layer Llama with random weights and no tokenizer (tests/unit/capi/tiny_model.cc).
const tinyConfig = `{
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 300,
  "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
  "tie_word_embeddings": false, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
  "torch_dtype": "float32"
}`

// loadTinyModel loads the tiny Llama with the weights of seed 7; the caller closes it.
func loadTinyModel(t *testing.T) *pulseinfer.Model {
	t.Helper()
	config := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(config, []byte(tinyConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	params := pulseinfer.DefaultModelParams()
	params.RandomWeights = true
	params.RandomSeed = 7
	params.Threads = 1
	tiny, err := pulseinfer.LoadModel(config, &params)
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
