//! An engine: `pulse_engine`, internally synchronized, and the requests submitted to it.

use std::ffi::c_void;
use std::ptr::{self, NonNull};
use std::{fmt, mem};

use pulseinfer_sys as sys;

use crate::engine_params::EngineParams;
use crate::error::{check, Result};
use crate::generation::Generation;
use crate::model::Model;
use crate::router::{on_token, Router};
use crate::sampling_params::SamplingParams;
use crate::stats::{EngineStats, RequestStats};
use crate::text::{CConversation, ChatMessage, TokenizeFlags};

/// Runs requests over one model with continuous batching. Share it between threads by
/// reference (`&Engine`, or an `Arc<Engine>`): every method takes `&self`.
pub struct Engine {
    raw: NonNull<sys::pulse_engine>,
    // Boxed: its address is every request's user_data, so it must not move with the Engine.
    router: Box<Router>,
}

// SAFETY: pulseinfer.h makes pulse_engine internally synchronized: every function taking one
// may be called from any thread at once, except pulse_engine_free, which Drop calls with the
// only reference. Token callbacks run on the stepping thread and touch only the Router, a Mutex.
unsafe impl Send for Engine {}
unsafe impl Sync for Engine {}

impl Engine {
    /// Creates an engine over `model` (which it keeps a reference to) and allocates its KV
    /// cache: [`Error::OutOfMemory`](crate::Error::OutOfMemory) when that does not fit.
    pub fn new(model: &Model, params: &EngineParams) -> Result<Engine> {
        let mut raw = ptr::null_mut();
        // SAFETY: the model is live and the params are a valid struct.
        check(unsafe { sys::pulse_engine_create(model.as_ptr(), params.as_raw(), &mut raw) })?;
        let raw = NonNull::new(raw).expect("pulse_engine_create gave OK and a NULL engine");
        Ok(Engine { raw, router: Box::default() })
    }

    /// Queues a generation after the prompt `tokens`; iterate the result for its tokens.
    pub fn submit(&self, tokens: &[i32], sampling: &SamplingParams) -> Result<Generation<'_>> {
        let sampling = sampling.to_c()?;
        self.queue(|callback, user_data, id| {
            // SAFETY: the prompt and the params are valid for the call, which copies them.
            unsafe {
                sys::pulse_request_submit(
                    self.raw.as_ptr(),
                    tokens.as_ptr(),
                    tokens.len(),
                    sampling.as_ptr(),
                    callback,
                    user_data,
                    id,
                )
            }
        })
    }

    /// Queues a generation after `text`, encoded with the model's tokenizer and `flags`:
    /// [`TokenizeFlags::DEFAULT`] for plain text, [`TokenizeFlags::PARSE_SPECIAL`] alone for the
    /// output of [`Model::apply_chat_template`](crate::Model::apply_chat_template).
    pub fn submit_text(
        &self,
        text: &str,
        flags: TokenizeFlags,
        sampling: &SamplingParams,
    ) -> Result<Generation<'_>> {
        let sampling = sampling.to_c()?;
        self.queue(|callback, user_data, id| {
            // SAFETY: the text and the params are valid for the call, which copies them.
            unsafe {
                sys::pulse_request_submit_text(
                    self.raw.as_ptr(),
                    text.as_ptr().cast(),
                    text.len(),
                    flags.bits(),
                    sampling.as_ptr(),
                    callback,
                    user_data,
                    id,
                )
            }
        })
    }

    /// Queues a generation after a conversation (llama-cpp-python's `create_chat_completion`,
    /// vLLM's `LLM.chat`): `messages` formatted with the model's chat template and its generation
    /// prompt, the template's markers read as special tokens.
    /// [`Error::NotFound`](crate::Error::NotFound) when the model has no chat template.
    pub fn submit_chat(
        &self,
        messages: &[ChatMessage<'_>],
        sampling: &SamplingParams,
    ) -> Result<Generation<'_>> {
        let conversation = CConversation::new(messages)?;
        let sampling = sampling.to_c()?;
        self.queue(|callback, user_data, id| {
            // SAFETY: the conversation and the params are valid for the call, which copies them.
            unsafe {
                sys::pulse_request_submit_chat(
                    self.raw.as_ptr(),
                    conversation.as_ptr(),
                    conversation.len(),
                    sampling.as_ptr(),
                    callback,
                    user_data,
                    id,
                )
            }
        })
    }

    /// Submits every prompt (text, encoded with `flags`) at once, so that they share the
    /// engine's steps, and runs them to the end (vLLM's `LLM.generate` over a list): their
    /// completions in the prompts' order. The first error (a prompt refused, a request that
    /// failed) is returned instead, and the other requests are cancelled.
    pub fn generate_batch(
        &self,
        prompts: &[&str],
        flags: TokenizeFlags,
        sampling: &SamplingParams,
    ) -> Result<Vec<Completion>> {
        let generations = prompts
            .iter()
            .map(|prompt| self.submit_text(prompt, flags, sampling))
            .collect::<Result<Vec<Generation<'_>>>>()?;
        generations.into_iter().map(Completion::collect).collect()
    }

    /// Runs `submit(callback, user_data, out_id)`, a pulse_request_submit*, with the router's
    /// callback; the router outlives every call of it (see router.rs).
    fn queue(
        &self,
        submit: impl FnOnce(sys::pulse_token_callback, *mut c_void, &mut u64) -> sys::pulse_status,
    ) -> Result<Generation<'_>> {
        let id = self.router.open(|| {
            let mut id = 0;
            check(submit(Some(on_token), self.router.user_data(), &mut id)).map(|()| id)
        })?;
        Ok(Generation::new(self, id))
    }

    /// Totals since the engine was created, and its state now.
    pub fn stats(&self) -> Result<EngineStats> {
        let mut stats = sys::pulse_engine_stats {
            struct_size: mem::size_of::<sys::pulse_engine_stats>() as u32,
            ..Default::default()
        };
        // SAFETY: the engine is live and stats is a struct of the size it declares.
        check(unsafe { sys::pulse_engine_stats_get(self.raw.as_ptr(), &mut stats) })?;
        Ok(EngineStats::from_raw(&stats))
    }

    /// Runs one step on this thread (a concurrent step waits for it), delivering its tokens to
    /// the router. Returns the requests still queued or running.
    pub(crate) fn step(&self) -> Result<i32> {
        let mut report = sys::pulse_step_report {
            struct_size: mem::size_of::<sys::pulse_step_report>() as u32,
            ..Default::default()
        };
        // SAFETY: the engine is live, report is a struct of the size it declares, and this is
        // not a token callback (those are the router's and never step).
        check(unsafe { sys::pulse_engine_step(self.raw.as_ptr(), &mut report) })?;
        Ok(report.pending)
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::pulse_engine {
        self.raw.as_ptr()
    }

    pub(crate) fn router(&self) -> &Router {
        &self.router
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no other call on this engine runs (every Generation borrows it),
        // and so no callback; the router is dropped after this.
        unsafe { sys::pulse_engine_free(self.raw.as_ptr()) }
    }
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine").field("raw", &self.raw).finish()
    }
}

/// A finished generation: its tokens, their text and its figures.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Completion {
    pub tokens: Vec<i32>,
    pub text: String,
    pub stats: RequestStats,
}

impl Completion {
    /// Reads `generation` to its end.
    fn collect(mut generation: Generation<'_>) -> Result<Completion> {
        let mut tokens = Vec::new();
        let mut text = String::new();
        for token in generation.by_ref() {
            let token = token?;
            tokens.push(token.id);
            text.push_str(&token.text);
        }
        Ok(Completion { tokens, text, stats: generation.stats()? })
    }
}
