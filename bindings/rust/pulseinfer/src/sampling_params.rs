//! How a request's tokens are chosen and when it stops: `pulse_sampling_params`.

use std::ffi::{CStr, CString};
use std::marker::PhantomData;
use std::mem;
use std::os::raw::c_char;

use pulseinfer_sys as sys;

use crate::engine_params::OffloadMode;
use crate::error::Result;
use crate::strings::c_string;

/// Parameters of [`Engine::submit`](crate::Engine::submit); the defaults are the library's
/// (`pulse_sampling_params_init`: temperature 1, 128 tokens). Temperature 0 is greedy.
#[derive(Clone, Debug)]
pub struct SamplingParams {
    raw: sys::pulse_sampling_params,
    stop_token_ids: Vec<i32>,
    stop_strings: Vec<String>,
}

// SAFETY: the pointers of `raw` are always NULL here (only the copy in CSamplingParams points
// anywhere); the rest is plain data.
unsafe impl Send for SamplingParams {}
unsafe impl Sync for SamplingParams {}

impl Default for SamplingParams {
    fn default() -> Self {
        let mut raw = sys::pulse_sampling_params::default();
        // SAFETY: raw is a valid struct of the size passed.
        let status = unsafe { sys::pulse_sampling_params_init(&mut raw, mem::size_of_val(&raw)) };
        assert_eq!(status, sys::PULSE_OK, "pulse_sampling_params_init refused its own struct");
        SamplingParams { raw, stop_token_ids: Vec::new(), stop_strings: Vec::new() }
    }
}

impl SamplingParams {
    /// 0 is greedy (argmax, lowest id on ties); otherwise tokens are drawn with the generator
    /// seeded by [`seed`](Self::seed), after the repetition penalty, temperature, top-k, top-p
    /// and min-p, in that order.
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.raw.temperature = temperature;
        self
    }

    /// Keeps the `k` likeliest tokens; 0 (the default) is off.
    pub fn top_k(mut self, k: i32) -> Self {
        self.raw.top_k = k;
        self
    }

    /// Keeps the likeliest tokens whose probabilities sum to `p`, in (0, 1]; 1 (the default)
    /// is off.
    pub fn top_p(mut self, p: f32) -> Self {
        self.raw.top_p = p;
        self
    }

    /// Drops tokens less likely than `p` times the likeliest, in [0, 1]; 0 (the default) is off.
    pub fn min_p(mut self, p: f32) -> Self {
        self.raw.min_p = p;
        self
    }

    /// Penalizes tokens of the prompt and the output, > 0; 1 (the default) is off.
    pub fn repetition_penalty(mut self, penalty: f32) -> Self {
        self.raw.repetition_penalty = penalty;
        self
    }

    /// Tokens to generate, >= 1.
    pub fn max_tokens(mut self, tokens: i32) -> Self {
        self.raw.max_tokens = tokens;
        self
    }

    /// The seed of the sampling generator: same seed, same tokens.
    pub fn seed(mut self, seed: u64) -> Self {
        self.raw.seed = seed;
        self
    }

    /// When true, the model's end-of-sequence tokens do not stop the generation.
    pub fn ignore_eos(mut self, ignore: bool) -> Self {
        self.raw.ignore_eos = i32::from(ignore);
        self
    }

    /// Extra tokens that stop the generation; the stop token is part of the output.
    pub fn stop_token_ids(mut self, ids: impl IntoIterator<Item = i32>) -> Self {
        self.stop_token_ids = ids.into_iter().collect();
        self
    }

    /// The request's own offloading within its engine's: [`OffloadMode::Engine`] (the
    /// default) as the engine, [`OffloadMode::Off`] dense (its whole context stays in the KV
    /// cache), or the engine's own mode; another mode is an invalid argument at submit, and an
    /// engine without offloading refuses any but `Engine` and `Off`.
    pub fn offload_mode(mut self, mode: OffloadMode) -> Self {
        self.raw.offload_mode = mode as i32;
        self
    }

    /// The request's own token budget; 0 (the default) is the engine's.
    pub fn offload_budget_tokens(mut self, tokens: i32) -> Self {
        self.raw.offload_budget_tokens = tokens;
        self
    }

    /// The request's own sink tokens; -1 (the default) is the engine's.
    pub fn offload_sink_tokens(mut self, tokens: i32) -> Self {
        self.raw.offload_sink_tokens = tokens;
        self
    }

    /// The request's own window tokens; -1 (the default) is the engine's.
    pub fn offload_window_tokens(mut self, tokens: i32) -> Self {
        self.raw.offload_window_tokens = tokens;
        self
    }

    /// Texts that stop the generation as soon as its text holds one (even across tokens); the
    /// text ends just before it. They need the model's tokenizer, and must not be empty.
    pub fn stop_strings<S: Into<String>>(mut self, texts: impl IntoIterator<Item = S>) -> Self {
        self.stop_strings = texts.into_iter().map(Into::into).collect();
        self
    }

    /// The C struct, pointing into this and into its own copies of the stop strings.
    pub(crate) fn to_c(&self) -> Result<CSamplingParams<'_>> {
        let stop_strings = self
            .stop_strings
            .iter()
            .map(|text| c_string(text.as_str(), "a stop string"))
            .collect::<Result<Vec<CString>>>()?;
        let stop_string_ptrs: Vec<*const c_char> =
            stop_strings.iter().map(|text| CStr::as_ptr(text)).collect();
        let mut raw = self.raw;
        if !self.stop_token_ids.is_empty() {
            raw.stop_token_ids = self.stop_token_ids.as_ptr();
            raw.stop_token_count = self.stop_token_ids.len();
        }
        if !stop_string_ptrs.is_empty() {
            raw.stop_strings = stop_string_ptrs.as_ptr();
            raw.stop_string_count = stop_string_ptrs.len();
        }
        Ok(CSamplingParams {
            raw,
            _stop_strings: stop_strings,
            _stop_string_ptrs: stop_string_ptrs,
            _params: PhantomData,
        })
    }
}

/// `pulse_sampling_params` and what it points at (a Vec's or CString's heap data does not move
/// with it); the stop token ids stay in the `SamplingParams` it borrows.
pub(crate) struct CSamplingParams<'a> {
    raw: sys::pulse_sampling_params,
    _stop_strings: Vec<CString>,
    _stop_string_ptrs: Vec<*const c_char>,
    _params: PhantomData<&'a SamplingParams>,
}

impl CSamplingParams<'_> {
    pub(crate) fn as_ptr(&self) -> *const sys::pulse_sampling_params {
        &self.raw
    }
}
