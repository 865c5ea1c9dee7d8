//! A loaded model: `pulse_model`, immutable and reference-counted.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::{self, NonNull};
use std::{fmt, mem};

use pulseinfer_sys as sys;

use crate::error::{check, Result};
use crate::model_info::ModelInfo;
use crate::model_params::ModelParams;
use crate::strings::c_string;

/// A model's weights and tokenizer. Cloning adds a reference to the same model; the model is
/// freed with its last reference (an [`Engine`](crate::Engine) holds its own).
pub struct Model {
    raw: NonNull<sys::pulse_model>,
}

// SAFETY: a pulse_model is immutable once loaded, its reference count is atomic, and every
// function taking one may be called from any thread at once (pulseinfer.h).
unsafe impl Send for Model {}
unsafe impl Sync for Model {}

impl Model {
    /// Loads a GGUF file, a Hugging Face directory (config.json with model.safetensors), or
    /// random weights for a config.json ([`ModelParams::random_weights`]). Takes seconds, on
    /// the calling thread.
    pub fn load(path: impl AsRef<Path>, params: &ModelParams) -> Result<Model> {
        let c_path = c_string(path.as_ref().as_os_str().as_bytes(), "the model's path")?;
        let params = params.to_c()?;
        let mut raw = ptr::null_mut();
        // SAFETY: the path and the params (with their strings) are valid for the call, which
        // does not keep them.
        check(unsafe { sys::pulse_model_load(c_path.as_ptr(), params.as_ptr(), &mut raw) })?;
        let raw = NonNull::new(raw).expect("pulse_model_load gave OK and a NULL model");
        Ok(Model { raw })
    }

    /// The model's shapes, formats, backend, tokenizer and chat template.
    pub fn info(&self) -> Result<ModelInfo> {
        let mut info = sys::pulse_model_info {
            struct_size: mem::size_of::<sys::pulse_model_info>() as u32,
            ..Default::default()
        };
        // SAFETY: the model is live and info is a struct of the size it declares.
        check(unsafe { sys::pulse_model_info_get(self.raw.as_ptr(), &mut info) })?;
        // SAFETY: its strings are owned by the model, which outlives this call.
        Ok(unsafe { ModelInfo::from_raw(&info) })
    }

    pub(crate) fn as_ptr(&self) -> *const sys::pulse_model {
        self.raw.as_ptr()
    }
}

impl Clone for Model {
    fn clone(&self) -> Self {
        // SAFETY: the model is live; retain returns the same handle with one more reference.
        let raw = unsafe { sys::pulse_model_retain(self.raw.as_ptr()) };
        Model { raw: NonNull::new(raw).expect("pulse_model_retain returned NULL") }
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        // SAFETY: this handle holds one reference, given back here and never used again.
        unsafe { sys::pulse_model_free(self.raw.as_ptr()) }
    }
}

impl fmt::Debug for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Model").field("raw", &self.raw).finish()
    }
}
