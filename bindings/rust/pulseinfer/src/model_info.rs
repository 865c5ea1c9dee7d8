//! What a model is: `pulse_model_info`, copied.

use std::ffi::CStr;
use std::os::raw::c_char;

use pulseinfer_sys as sys;

/// A model's description, from [`Model::info`](crate::Model::info).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelInfo {
    pub num_layers: i32,
    pub num_heads: i32,
    pub num_kv_heads: i32,
    pub head_dim: i32,
    pub hidden_size: i32,
    pub intermediate_size: i32,
    pub vocab_size: i32,
    /// The longest context the model supports.
    pub context_length: i32,
    /// The output projection is the embedding table.
    pub tie_word_embeddings: bool,
    /// Tied embeddings counted once.
    pub parameter_count: i64,
    /// "llama", "mistral", "qwen2".
    pub architecture: String,
    /// "gguf", "safetensors", "random".
    pub format: String,
    /// The file's type holding most weights: "Q4_1", "bf16"...
    pub stored_type: String,
    /// As stored on the backend: "f32", "bf16", "quantized".
    pub weight_type: String,
    /// "cpu", "cuda".
    pub backend: String,
    pub bos_token: Option<i32>,
    pub eos_token: Option<i32>,
    /// "gpt2" (byte-level BPE) or "llama" (SentencePiece-style BPE); None without a tokenizer
    /// (random weights), when text functions fail with [`Error::Unsupported`](crate::Error).
    pub tokenizer: Option<String>,
    /// The chat template's family as recognised ("chatml", "llama3"...); None when the model
    /// has none or not one the library renders.
    pub chat_template: Option<String>,
    /// The ranks the model is split over (1 for one); the sizes above are the whole model's.
    pub tensor_parallel_size: i32,
}

impl ModelInfo {
    /// # Safety
    /// The strings of `info` must be valid NUL-terminated strings.
    pub(crate) unsafe fn from_raw(info: &sys::pulse_model_info) -> ModelInfo {
        let string = |text: *const c_char| CStr::from_ptr(text).to_string_lossy().into_owned();
        let non_empty = |text: *const c_char| Some(string(text)).filter(|text| !text.is_empty());
        let token = |id: i32| Some(id).filter(|&id| id >= 0);
        ModelInfo {
            num_layers: info.num_layers,
            num_heads: info.num_heads,
            num_kv_heads: info.num_kv_heads,
            head_dim: info.head_dim,
            hidden_size: info.hidden_size,
            intermediate_size: info.intermediate_size,
            vocab_size: info.vocab_size,
            context_length: info.context_length,
            tie_word_embeddings: info.tie_word_embeddings != 0,
            parameter_count: info.parameter_count,
            architecture: string(info.architecture),
            format: string(info.format),
            stored_type: string(info.stored_type),
            weight_type: string(info.weight_type),
            backend: string(info.backend),
            bos_token: token(info.bos_token),
            eos_token: token(info.eos_token),
            tokenizer: non_empty(info.tokenizer),
            chat_template: non_empty(info.chat_template),
            tensor_parallel_size: info.tensor_parallel_size,
        }
    }
}
