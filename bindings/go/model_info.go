package pulseinfer

// #include <pulseinfer/pulseinfer.h>
import "C"

import "runtime"

// ModelInfo describes a model (pulse_model_info).
type ModelInfo struct {
	Architecture string // "llama", "mistral", "qwen2"
	Format       string // "gguf", "safetensors", "random"
	StoredType   string // the file's type holding most weights: "Q4_1", "bf16"...
	WeightType   string // as stored on the backend: "f32", "bf16", "quantized"
	Backend      string // "cpu", "cuda"

	NumLayers         int32
	NumHeads          int32
	NumKVHeads        int32
	HeadDim           int32
	HiddenSize        int32
	IntermediateSize  int32
	VocabSize         int32
	ContextLength     int32 // the longest context the model supports
	TieWordEmbeddings bool  // the output projection is the embedding table
	ParameterCount    int64 // tied embeddings counted once

	// Tokenizer is "gpt2" (byte-level BPE), "llama" (SentencePiece-style BPE), or "" when the
	// model has none (random weights): then the text functions fail with ErrUnsupported.
	Tokenizer string
	BOSToken  int32 // -1 when the tokenizer has none
	EOSToken  int32 // -1 when the tokenizer has none
	// ChatTemplate is the family of the model's chat template ("chatml", "llama3"...), or ""
	// when it has none or one ApplyChatTemplate does not render.
	ChatTemplate string
	// TensorParallelSize is the ranks the model is split over (1 for one); the sizes above are
	// the whole model's.
	TensorParallelSize int32
}

func (m *Model) readInfo() (ModelInfo, error) {
	defer runtime.KeepAlive(m)
	info := C.pulse_model_info{struct_size: C.sizeof_pulse_model_info}
	if err := call(func() C.pulse_status { return C.pulse_model_info_get(m.model, &info) }); err != nil {
		return ModelInfo{}, err
	}
	return ModelInfo{
		Architecture:       C.GoString(info.architecture),
		Format:             C.GoString(info.format),
		StoredType:         C.GoString(info.stored_type),
		WeightType:         C.GoString(info.weight_type),
		Backend:            C.GoString(info.backend),
		NumLayers:          int32(info.num_layers),
		NumHeads:           int32(info.num_heads),
		NumKVHeads:         int32(info.num_kv_heads),
		HeadDim:            int32(info.head_dim),
		HiddenSize:         int32(info.hidden_size),
		IntermediateSize:   int32(info.intermediate_size),
		VocabSize:          int32(info.vocab_size),
		ContextLength:      int32(info.context_length),
		TieWordEmbeddings:  info.tie_word_embeddings != 0,
		ParameterCount:     int64(info.parameter_count),
		Tokenizer:          C.GoString(info.tokenizer),
		BOSToken:           int32(info.bos_token),
		EOSToken:           int32(info.eos_token),
		ChatTemplate:       C.GoString(info.chat_template),
		TensorParallelSize: int32(info.tensor_parallel_size),
	}, nil
}
