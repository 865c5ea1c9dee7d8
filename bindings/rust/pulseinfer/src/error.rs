//! Statuses as errors: one variant per `pulse_status`, with the library's message.

use std::ffi::CStr;
use std::fmt;

use pulseinfer_sys as sys;

/// What a failing call returned: its status, as a variant, and the message
/// `pulse_last_error()` gave for it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The engine cannot take this work now.
    NoCapacity(String),
    /// The request was cancelled.
    Cancelled(String),
    /// The request is not finished yet.
    Again(String),
    /// An output buffer was too small.
    BufferTooSmall(String),
    /// A NULL, out-of-range or inconsistent argument (also a string holding a NUL byte).
    InvalidArgument(String),
    /// No such file, request or tensor.
    NotFound(String),
    /// A file exists but cannot be read.
    Io(String),
    /// Not a model this library can read, or corrupt.
    InvalidModel(String),
    /// Valid, but not supported by this build or backend.
    Unsupported(String),
    /// Memory or KV capacity that can never be enough.
    OutOfMemory(String),
    /// The object is in the wrong state for the call.
    FailedPrecondition(String),
    /// A bug in the library; the message says where.
    Internal(String),
    /// A status this binding does not know (from a newer library).
    Unknown { status: i32, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The error for a non-OK `status` just returned by a call on this thread, with
    /// `pulse_last_error()` (thread-local, and replaced by the next call: read it at once).
    pub(crate) fn last(status: sys::pulse_status) -> Error {
        // SAFETY: pulse_last_error never returns NULL; the string stays valid until the next
        // call into the library on this thread, and it is copied before that.
        let message = unsafe { CStr::from_ptr(sys::pulse_last_error()) };
        Error::new(status, message.to_string_lossy().into_owned())
    }

    /// The error of `status` with a message of this binding (for arguments it rejects itself).
    pub(crate) fn new(status: sys::pulse_status, message: String) -> Error {
        match status {
            sys::PULSE_NO_CAPACITY => Error::NoCapacity(message),
            sys::PULSE_CANCELLED => Error::Cancelled(message),
            sys::PULSE_AGAIN => Error::Again(message),
            sys::PULSE_BUFFER_TOO_SMALL => Error::BufferTooSmall(message),
            sys::PULSE_INVALID_ARGUMENT => Error::InvalidArgument(message),
            sys::PULSE_NOT_FOUND => Error::NotFound(message),
            sys::PULSE_IO => Error::Io(message),
            sys::PULSE_INVALID_MODEL => Error::InvalidModel(message),
            sys::PULSE_UNSUPPORTED => Error::Unsupported(message),
            sys::PULSE_OUT_OF_MEMORY => Error::OutOfMemory(message),
            sys::PULSE_FAILED_PRECONDITION => Error::FailedPrecondition(message),
            sys::PULSE_INTERNAL => Error::Internal(message),
            status => Error::Unknown { status, message },
        }
    }

    /// The `pulse_status` code.
    pub fn status(&self) -> i32 {
        match self {
            Error::NoCapacity(_) => sys::PULSE_NO_CAPACITY,
            Error::Cancelled(_) => sys::PULSE_CANCELLED,
            Error::Again(_) => sys::PULSE_AGAIN,
            Error::BufferTooSmall(_) => sys::PULSE_BUFFER_TOO_SMALL,
            Error::InvalidArgument(_) => sys::PULSE_INVALID_ARGUMENT,
            Error::NotFound(_) => sys::PULSE_NOT_FOUND,
            Error::Io(_) => sys::PULSE_IO,
            Error::InvalidModel(_) => sys::PULSE_INVALID_MODEL,
            Error::Unsupported(_) => sys::PULSE_UNSUPPORTED,
            Error::OutOfMemory(_) => sys::PULSE_OUT_OF_MEMORY,
            Error::FailedPrecondition(_) => sys::PULSE_FAILED_PRECONDITION,
            Error::Internal(_) => sys::PULSE_INTERNAL,
            Error::Unknown { status, .. } => *status,
        }
    }

    /// The library's message (or this binding's, for an argument it rejected itself).
    pub fn message(&self) -> &str {
        match self {
            Error::NoCapacity(message)
            | Error::Cancelled(message)
            | Error::Again(message)
            | Error::BufferTooSmall(message)
            | Error::InvalidArgument(message)
            | Error::NotFound(message)
            | Error::Io(message)
            | Error::InvalidModel(message)
            | Error::Unsupported(message)
            | Error::OutOfMemory(message)
            | Error::FailedPrecondition(message)
            | Error::Internal(message)
            | Error::Unknown { message, .. } => message,
        }
    }
}

impl fmt::Display for Error {
    /// "invalid argument: temperature must be >= 0" (the status's name, then the message).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: pulse_status_string returns a static string, never NULL, for any code.
        let name = unsafe { CStr::from_ptr(sys::pulse_status_string(self.status())) };
        write!(f, "{}: {}", name.to_string_lossy(), self.message())
    }
}

impl std::error::Error for Error {}

/// `Ok(())` for PULSE_OK, else the error with its message. Call it right after the call that
/// returned `status`, on the same thread.
pub(crate) fn check(status: sys::pulse_status) -> Result<()> {
    if status == sys::PULSE_OK {
        Ok(())
    } else {
        Err(Error::last(status))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_call_gives_its_variant_and_the_library_message() {
        // SAFETY: a NULL struct is an argument the function validates.
        let status = unsafe { sys::pulse_model_params_init(std::ptr::null_mut(), 0) };
        let error = check(status).unwrap_err();
        assert!(matches!(error, Error::InvalidArgument(_)), "{error:?}");
        assert_eq!(error.status(), sys::PULSE_INVALID_ARGUMENT);
        assert!(!error.message().is_empty());
        assert_eq!(error.to_string(), format!("invalid argument: {}", error.message()));
    }

    #[test]
    fn every_status_maps_back_to_itself() {
        for status in -9..=5 {
            if status != sys::PULSE_OK {
                assert_eq!(Error::new(status, String::new()).status(), status);
            }
        }
    }
}
