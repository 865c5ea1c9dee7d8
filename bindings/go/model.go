package pulseinfer

// #include <pulseinfer/pulseinfer.h>
import "C"

import "runtime"

// ModelParams are the options of LoadModel. DefaultModelParams has the library's defaults.
type ModelParams struct {
	// Threads of the CPU backend, the calling one included; 0: one per hardware core.
	Threads int32
	// Backend is "auto" (CUDA when built and a device is present, else CPU), "cpu" or "cuda".
	// "" is "auto".
	Backend string
	// WeightType is how weights are stored on the backend: "auto" (quantized on the CPU, bf16
	// on CUDA), "f32", "bf16", or "quantized" (a GGUF file's Q8_0, Q4_0, Q4_1, Q4_K and Q6_K
	// matrices stay in their blocks where the backend computes on them: the CPU). "" is "auto".
	WeightType string
	// RandomWeights makes the path name a Hugging Face config.json (or its directory) and the
	// weights random values, seeded by RandomSeed, at that config's shapes.
	RandomWeights bool
	RandomSeed    uint64
	// MemoryLimitBytes caps the backend's memory (weights plus KV cache); 0: no cap.
	MemoryLimitBytes uint64
	// TensorParallelSize splits the model over that many ranks, each with its share of the KV
	// heads and of every matrix and its own KV cache and offload tiers; engines over it give the
	// one-rank tokens. On the CPU a rank is Threads/TensorParallelSize threads; CUDA ranks are
	// not in this build. 0 or 1: one rank.
	TensorParallelSize int32
}

// DefaultModelParams returns the library's defaults (pulse_model_params_init).
func DefaultModelParams() ModelParams {
	var params C.pulse_model_params
	C.pulse_model_params_init(&params, C.sizeof_pulse_model_params) // cannot fail: the header's own size
	return ModelParams{
		Threads:            int32(params.threads),
		Backend:            C.GoString(params.backend),
		WeightType:         C.GoString(params.weight_type),
		RandomWeights:      params.random_weights != 0,
		RandomSeed:         uint64(params.random_seed),
		MemoryLimitBytes:   uint64(params.memory_limit_bytes),
		TensorParallelSize: int32(params.tensor_parallel_size),
	}
}

// toC fills the C struct, its strings allocated in memory.
func (p *ModelParams) toC(memory *cMemory) C.pulse_model_params {
	var params C.pulse_model_params
	C.pulse_model_params_init(&params, C.sizeof_pulse_model_params)
	params.threads = C.int32_t(p.Threads)
	params.backend = memory.optionalString(p.Backend)
	params.weight_type = memory.optionalString(p.WeightType)
	params.random_weights = C.int32_t(boolInt(p.RandomWeights))
	params.random_seed = C.uint64_t(p.RandomSeed)
	params.memory_limit_bytes = C.uint64_t(p.MemoryLimitBytes)
	params.tensor_parallel_size = C.int64_t(p.TensorParallelSize)
	return params
}

// Model is a loaded model: immutable, safe for concurrent use. Engines hold their own reference,
// so a model may be closed while engines made from it still run.
type Model struct {
	model *C.pulse_model
	info  ModelInfo
}

// LoadModel loads a GGUF file, a Hugging Face directory (config.json plus safetensors), or
// random weights (ModelParams.RandomWeights); the format is detected from the content. nil
// params are the defaults. Loading may take seconds.
func LoadModel(path string, params *ModelParams) (*Model, error) {
	var memory cMemory
	defer memory.free()
	cPath := memory.string(path)
	var cParams *C.pulse_model_params
	if params != nil {
		filled := params.toC(&memory)
		cParams = &filled
	}
	m := &Model{}
	if err := call(func() C.pulse_status { return C.pulse_model_load(cPath, cParams, &m.model) }); err != nil {
		return nil, err
	}
	runtime.SetFinalizer(m, (*Model).Close)
	info, err := m.readInfo()
	if err != nil {
		m.Close()
		return nil, err
	}
	m.info = info
	return m, nil
}

// Close releases the model. It is idempotent, and must not run concurrently with another method
// of m.
func (m *Model) Close() {
	if m.model == nil {
		return
	}
	C.pulse_model_free(m.model)
	m.model = nil
	runtime.SetFinalizer(m, nil)
	modelFreed()
}

// modelFreed runs after Close frees a model, from a finalizer too (tests observe it).
var modelFreed = func() {}

// Info describes the model.
func (m *Model) Info() ModelInfo { return m.info }
