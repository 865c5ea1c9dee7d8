//! The model's tokenizer and chat template: `pulse_tokenize`, `pulse_detokenize` and
//! `pulse_chat_apply_template`.

use std::ffi::CString;

use bitflags::bitflags;
use pulseinfer_sys as sys;

use crate::buffer::{read_text, read_tokens};
use crate::error::Result;
use crate::model::Model;
use crate::strings::c_string;

bitflags! {
    /// How text becomes tokens, in [`Model::tokenize`] and [`Engine::submit_text`](crate::Engine::submit_text).
    pub struct TokenizeFlags: u32 {
        /// BOS (and EOS) as the tokenizer adds them.
        const ADD_SPECIAL = sys::PULSE_TOKENIZE_ADD_SPECIAL;
        /// "<|im_start|>" written in the text is its token.
        const PARSE_SPECIAL = sys::PULSE_TOKENIZE_PARSE_SPECIAL;
        /// Plain text: both of the above. (The output of [`Model::apply_chat_template`]
        /// takes [`TokenizeFlags::PARSE_SPECIAL`] alone: it already holds the template's BOS.)
        const DEFAULT = sys::PULSE_TOKENIZE_DEFAULT;
    }
}

bitflags! {
    /// How tokens become text, in [`Model::detokenize`].
    pub struct DetokenizeFlags: u32 {
        /// Control tokens (<|im_end|>, <s>) as their text, instead of nothing.
        const RENDER_SPECIAL = sys::PULSE_DETOKENIZE_RENDER_SPECIAL;
    }
}

/// One message of a conversation, for [`Model::apply_chat_template`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChatMessage<'a> {
    /// "system", "user" or "assistant".
    pub role: &'a str,
    pub content: &'a str,
}

impl<'a> ChatMessage<'a> {
    pub fn system(content: &'a str) -> Self {
        ChatMessage { role: "system", content }
    }

    pub fn user(content: &'a str) -> Self {
        ChatMessage { role: "user", content }
    }

    pub fn assistant(content: &'a str) -> Self {
        ChatMessage { role: "assistant", content }
    }
}

impl Model {
    /// Encodes `text` with the model's tokenizer.
    pub fn tokenize(&self, text: &str, flags: TokenizeFlags) -> Result<Vec<i32>> {
        read_tokens(|tokens, capacity, count| {
            // SAFETY: the text and the buffer are valid for the lengths passed.
            unsafe {
                sys::pulse_tokenize(
                    self.as_ptr(),
                    text.as_ptr().cast(),
                    text.len(),
                    flags.bits(),
                    tokens,
                    capacity,
                    count,
                )
            }
        })
    }

    /// Decodes `tokens` to text; bytes that are not UTF-8 (byte tokens that form no
    /// character) become U+FFFD.
    pub fn detokenize(&self, tokens: &[i32], flags: DetokenizeFlags) -> Result<String> {
        read_text(|text, capacity, len| {
            // SAFETY: the tokens and the buffer are valid for the lengths passed.
            unsafe {
                sys::pulse_detokenize(
                    self.as_ptr(),
                    tokens.as_ptr(),
                    tokens.len(),
                    flags.bits(),
                    text,
                    capacity,
                    len,
                )
            }
        })
    }

    /// Formats `messages` with the model's chat template, ending with the assistant's header
    /// when `add_generation_prompt`. Submit the result with [`TokenizeFlags::PARSE_SPECIAL`].
    pub fn apply_chat_template(
        &self,
        messages: &[ChatMessage<'_>],
        add_generation_prompt: bool,
    ) -> Result<String> {
        let conversation = CConversation::new(messages)?;
        read_text(|text, capacity, len| {
            // SAFETY: the conversation is alive for the call; the buffer is valid for its
            // capacity.
            unsafe {
                sys::pulse_chat_apply_template(
                    self.as_ptr(),
                    conversation.as_ptr(),
                    conversation.len(),
                    i32::from(add_generation_prompt),
                    text,
                    capacity,
                    len,
                )
            }
        })
    }
}

/// A conversation as the C ABI takes it: NUL-terminated copies of the messages and the structs
/// that point into them, kept alive together.
pub(crate) struct CConversation {
    // Each CString's bytes stay where they are when the Vec moves, so `raw` stays valid.
    _strings: Vec<(CString, CString)>,
    raw: Vec<sys::pulse_chat_message>,
}

impl CConversation {
    pub(crate) fn new(messages: &[ChatMessage<'_>]) -> Result<Self> {
        let strings = messages
            .iter()
            .map(|message| {
                Ok((c_string(message.role, "a role")?, c_string(message.content, "a message")?))
            })
            .collect::<Result<Vec<(CString, CString)>>>()?;
        let raw = strings
            .iter()
            .map(|(role, content)| sys::pulse_chat_message {
                role: role.as_ptr(),
                content: content.as_ptr(),
            })
            .collect();
        Ok(CConversation { _strings: strings, raw })
    }

    pub(crate) fn as_ptr(&self) -> *const sys::pulse_chat_message {
        self.raw.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.raw.len()
    }
}
