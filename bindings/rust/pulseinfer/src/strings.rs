//! Rust strings as the NUL-terminated strings some C arguments are.

use std::ffi::CString;

use pulseinfer_sys as sys;

use crate::error::{Error, Result};

/// `text` as a C string; `what` names the argument when it holds a NUL byte.
pub(crate) fn c_string(text: impl Into<Vec<u8>>, what: &str) -> Result<CString> {
    CString::new(text).map_err(|error| {
        Error::new(
            sys::PULSE_INVALID_ARGUMENT,
            format!("{what} holds a NUL byte at {}", error.nul_position()),
        )
    })
}
