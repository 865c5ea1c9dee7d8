//! How a model is loaded: `pulse_model_params`.

use std::ffi::{CStr, CString};
use std::{mem, ptr};

use pulseinfer_sys as sys;

use crate::error::Result;
use crate::strings::c_string;

/// Parameters of [`Model::load`](crate::Model::load); the defaults are the library's
/// (`pulse_model_params_init`).
#[derive(Clone, Debug)]
pub struct ModelParams {
    raw: sys::pulse_model_params,
    backend: Option<String>,
    weight_type: Option<String>,
}

// SAFETY: the pointers of `raw` are always NULL here (only the copy in CModelParams points
// anywhere); the rest is plain data.
unsafe impl Send for ModelParams {}
unsafe impl Sync for ModelParams {}

impl Default for ModelParams {
    fn default() -> Self {
        let mut raw = sys::pulse_model_params::default();
        // SAFETY: raw is a valid struct of the size passed.
        let status = unsafe { sys::pulse_model_params_init(&mut raw, mem::size_of_val(&raw)) };
        assert_eq!(status, sys::PULSE_OK, "pulse_model_params_init refused its own struct");
        ModelParams { raw, backend: None, weight_type: None }
    }
}

impl ModelParams {
    /// CPU threads for the model's backend, including the calling thread; 0 (the default) is
    /// one per hardware core.
    pub fn threads(mut self, threads: i32) -> Self {
        self.raw.threads = threads;
        self
    }

    /// "auto" (the default: CUDA when built and a device is present, else CPU), "cpu" or
    /// "cuda".
    pub fn backend(mut self, backend: impl Into<String>) -> Self {
        self.backend = Some(backend.into());
        self
    }

    /// How weights are stored on the backend: "auto" (the default: quantized on the CPU, bf16
    /// on CUDA), "f32", "bf16", or "quantized" (a GGUF file's Q8_0, Q4_0, Q4_1, Q4_K and Q6_K
    /// matrices stay in their blocks where the backend computes on them: the CPU).
    pub fn weight_type(mut self, weight_type: impl Into<String>) -> Self {
        self.weight_type = Some(weight_type.into());
        self
    }

    /// Seeded random weights at the real shapes of the Hugging Face config.json that the load
    /// path names (or its directory): a model without a tokenizer, for tests and benchmarks.
    pub fn random_weights(mut self, seed: u64) -> Self {
        self.raw.random_weights = 1;
        self.raw.random_seed = seed;
        self
    }

    /// A cap on the backend memory (weights plus KV cache) in bytes; 0 (the default) is none.
    pub fn memory_limit_bytes(mut self, bytes: u64) -> Self {
        self.raw.memory_limit_bytes = bytes;
        self
    }

    /// Tensor parallelism: the model split over `ranks` ranks, each with its share of the KV
    /// heads and of every matrix, its own KV cache and offload tiers; engines over it give the
    /// one-rank tokens. On the CPU a rank is threads/ranks threads; CUDA ranks are not in this
    /// build. 0 (the default) or 1 is one rank.
    pub fn tensor_parallel_size(mut self, ranks: i32) -> Self {
        self.raw.tensor_parallel_size = ranks.into();
        self
    }

    /// The C struct, with its strings.
    pub(crate) fn to_c(&self) -> Result<CModelParams> {
        let backend = self.backend.as_deref().map(|s| c_string(s, "backend")).transpose()?;
        let weight_type =
            self.weight_type.as_deref().map(|s| c_string(s, "weight_type")).transpose()?;
        let mut raw = self.raw;
        raw.backend = backend.as_deref().map_or(ptr::null(), CStr::as_ptr);
        raw.weight_type = weight_type.as_deref().map_or(ptr::null(), CStr::as_ptr);
        Ok(CModelParams { raw, _backend: backend, _weight_type: weight_type })
    }
}

/// `pulse_model_params` and the strings it points at (a CString's bytes do not move with it).
pub(crate) struct CModelParams {
    raw: sys::pulse_model_params,
    _backend: Option<CString>,
    _weight_type: Option<CString>,
}

impl CModelParams {
    pub(crate) fn as_ptr(&self) -> *const sys::pulse_model_params {
        &self.raw
    }
}
